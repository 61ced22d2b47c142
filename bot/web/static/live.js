// carry dashboard: live updates. The pages work without this file; with it, a server-sent
// event from /events/stream makes the page re-fetch itself and swap in its live region
// (#live), and a run page appends new log lines from /api/v1/runs/<id>/log?after=<id>.
(function () {
  "use strict";

  var root = document.documentElement;
  var region = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!region || !("EventSource" in window) || !window.fetch) {
    return;
  }
  var series = region.getAttribute("data-series") || "";
  var run = region.getAttribute("data-run") || "";
  var pollSeconds = parseInt(region.getAttribute("data-poll") || "0", 10);
  var log = document.getElementById("log");

  function say(state, text) {
    root.setAttribute("data-live", state);
    if (status) {
      status.textContent = text;
    }
  }

  // ---- the live region: one fetch at a time, bursts collapse into one refresh

  var timer = null;
  var busy = false;
  var again = false;

  function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (fresh) {
          region.innerHTML = fresh.innerHTML;
          var count = parseInt(root.getAttribute("data-refreshed") || "0", 10) + 1;
          root.setAttribute("data-refreshed", String(count));
        }
      })
      .catch(function () {
        say("stale", "Live update failed; reload the page to see changes.");
      })
      .then(function () {
        busy = false;
        if (again) {
          again = false;
          schedule();
        }
      });
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 150);
  }

  // ---- the run log: append what came after the last line shown

  var fetchingLog = false;
  var moreLog = false;

  function appendLog() {
    if (!log) {
      return;
    }
    if (fetchingLog) {
      moreLog = true;
      return;
    }
    fetchingLog = true;
    var after = log.getAttribute("data-after") || "-";
    var url = "/api/v1/runs/" + encodeURIComponent(run) + "/log?after=" + encodeURIComponent(after);
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.json();
      })
      .then(function (body) {
        body.lines.forEach(addLine);
        log.setAttribute("data-after", body.after);
        var empty = document.getElementById("log-empty");
        if (empty && body.lines.length) {
          empty.remove();
        }
      })
      .catch(function () {
        say("stale", "Live log failed; reload the page to see new lines.");
      })
      .then(function () {
        fetchingLog = false;
        if (moreLog) {
          moreLog = false;
          appendLog();
        }
      });
  }

  function addLine(line) {
    var span = document.createElement("span");
    span.className = line.stream === "stderr" ? "line err" : "line";
    if (line.stream !== "stdout") {
      var tag = document.createElement("span");
      tag.className = "tag";
      tag.textContent = line.stream + " ";
      span.appendChild(tag);
    }
    span.appendChild(document.createTextNode(line.text + "\n"));
    var atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.appendChild(span);
    if (atBottom) {
      log.scrollTop = log.scrollHeight;
    }
  }

  // ---- the stream

  function handle(event) {
    var message;
    try {
      message = JSON.parse(event.data);
    } catch (error) {
      return;
    }
    if (message.kind === "runlog") {
      if (run && message.run === run) {
        appendLog();
      }
      return;
    }
    if (!series || !message.series || message.series === series) {
      schedule();
    }
  }

  var everOpen = false;

  function connect() {
    var source = new EventSource("/events/stream");
    source.onopen = function () {
      say("on", "Live updates on");
      if (everOpen) {
        schedule(); // catch up with what happened while the stream was down
      }
      everOpen = true;
    };
    source.onmessage = handle;
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) {
        // The server refused the stream (e.g. 503); try again later ourselves.
        say("off", "Live updates paused; retrying…");
        setTimeout(connect, 5000);
      } else {
        say("reconnecting", "Live updates reconnecting…");
      }
    };
  }

  connect();
  if (pollSeconds > 0) {
    // Heartbeats and deliveries are not announced on the stream; re-read them now and then.
    setInterval(refresh, pollSeconds * 1000);
  }
})();
