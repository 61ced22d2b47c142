"""The dashboard: server-rendered HTML pages, live updates by server-sent events, SVG badges.

Pages work without JavaScript; static/live.js listens to /events/stream and refreshes the page's
live region (and appends run log lines) without a reload. Handlers only read the store. The
views are those of bot.web.api, so every page has a JSON twin.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from html import escape as xml_escape
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import quote, urlencode

import anyio
import jinja2
import redis
import redis.asyncio as aioredis
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, params
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from markupsafe import Markup, escape

from bot.config import CarryConfig
from bot.core.publishing import PublishStep
from bot.store.deliveries import recent_deliveries
from bot.store.series import UPDATES_CHANNEL, all_series, load_series
from bot.web.access import SESSION_COOKIE, Access
from bot.web.api import RunsQuery
from bot.web.models import AttentionOut, PatchOut, SeriesListOut, SeriesSummaryOut
from bot.web.series_cache import SeriesCache
from bot.web.timeline import OUTCOME_WORDS, Outcome, by_head, field_words
from bot.web.views import (
    FixPages,
    NotFound,
    age_seconds,
    age_text,
    commit_link,
    find_run,
    kept_summaries,
    listing,
    patch_detail,
    patch_out,
    pr_url,
    run_log,
    runners_view,
    runs_view,
    series_detail,
    series_history,
    series_summary,
    web_host,
)
from bot.web.worksheet import diff_lines, landings, worksheet

HERE: Final = Path(__file__).parent
TEMPLATES: Final = HERE / "templates"
STATIC: Final = HERE / "static"
RUN_LOG_LINES: Final = 5000
EVENTS_PAGE: Final = 100  # history entries per page of /events
_HEADERS: Final = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}

# --------------------------------------------------------------------------- status words

_TONES: Final = {
    "bad": {"conflict", "invalid", "failure", "infra-error", "error", "closed_unmerged"}
    | {"rejected_signature", "rejected_payload", "dispatch_failed", "problem", "red", "fail"},
    "warn": {"upstream-version", "partial", "review", "waiting-approval", "paused", "reverted"}
    | {"inconclusive"},
    "info": {"running", "queued", "pending", "awaiting-import", "drop", "draft", "superseded"},
    "good": {"applies", "applies-moved", "contained", "keep", "clean", "changed", "success"}
    | {"merged", "accepted", "reused", "green", "pass", "found"},
}


def tone(value: str | None) -> str:
    """A CSS class for a status word; the word itself is always shown as text too."""
    for name, words in _TONES.items():
        if value in words:
            return f"tone-{name}"
    return "tone-neutral"


# --------------------------------------------------------------------------- Markdown

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_ORDERED = re.compile(r"^\s*\d+[.)]\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s()]+)\)")
_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_EM = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_DELIMITER = re.compile(r"^\s*:?-+:?\s*$")


def render_markdown(text: str, heading_offset: int = 1) -> Markup:
    """A small, safe Markdown subset: headings, paragraphs, tables, lists, code, emphasis and
    http(s) links. Every character of the input is escaped; no raw HTML passes through."""
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        index = _block(lines, index, out, heading_offset)
    return Markup("\n".join(out))


def _block(lines: list[str], index: int, out: list[str], offset: int) -> int:
    line = lines[index]
    heading = _HEADING.match(line)
    if not line.strip():
        return index + 1
    if _FENCE.match(line):
        return _fenced(lines, index, out)
    if line.lstrip().startswith("<!--"):
        return _past_comment(lines, index)
    if heading:
        level = min(6, len(heading.group(1)) + offset)
        out.append(f"<h{level}>{inline_markdown(heading.group(2))}</h{level}>")
        return index + 1
    if line.lstrip().startswith("|"):
        return _table(lines, index, out)
    if _BULLET.match(line) or _ORDERED.match(line):
        return _list(lines, index, out)
    return _paragraph(lines, index, out)


def _past_comment(lines: list[str], index: int) -> int:
    """Lines of an HTML comment are not shown, as Markdown renderers hide them (a fix page
    from `carry new` explains its fields in comments)."""
    while index < len(lines) and "-->" not in lines[index]:
        index += 1
    return index + 1


def _starts_block(line: str) -> bool:
    stripped = line.lstrip()
    return bool(
        not stripped
        or _HEADING.match(line)
        or _FENCE.match(line)
        or stripped.startswith("|")
        or _BULLET.match(line)
        or _ORDERED.match(line)
    )


def _paragraph(lines: list[str], index: int, out: list[str]) -> int:
    words = [lines[index].strip()]
    index += 1
    while index < len(lines) and not _starts_block(lines[index]):
        words.append(lines[index].strip())
        index += 1
    out.append(f"<p>{inline_markdown(' '.join(words))}</p>")
    return index


def _fenced(lines: list[str], index: int, out: list[str]) -> int:
    marker = lines[index].strip()[:3]
    body: list[str] = []
    index += 1
    while index < len(lines) and not lines[index].strip().startswith(marker):
        body.append(lines[index])
        index += 1
    out.append(f"<pre><code>{escape(chr(10).join(body))}</code></pre>")
    return index + 1


def _list(lines: list[str], index: int, out: list[str]) -> int:
    ordered = _ORDERED.match(lines[index]) is not None
    pattern = _ORDERED if ordered else _BULLET
    items: list[str] = []
    while index < len(lines):
        line = lines[index]
        item = pattern.match(line)
        if item:
            items.append(item.group(1).strip())
        elif items and line.startswith((" ", "\t")) and line.strip():
            items[-1] += " " + line.strip()
        else:
            break
        index += 1
    tag = "ol" if ordered else "ul"
    rendered = "".join(f"<li>{inline_markdown(item)}</li>" for item in items)
    out.append(f"<{tag}>{rendered}</{tag}>")
    return index


def _cells(line: str) -> list[str]:
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(inner)]


def _table(lines: list[str], index: int, out: list[str]) -> int:
    rows: list[list[str]] = []
    while index < len(lines) and lines[index].lstrip().startswith("|"):
        rows.append(_cells(lines[index]))
        index += 1
    header: list[str] = []
    if len(rows) >= 2 and all(_DELIMITER.match(cell) for cell in rows[1]):
        header, rows = rows[0], rows[2:]
    head = "".join(f'<th scope="col">{inline_markdown(c)}</th>' for c in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{inline_markdown(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    thead = f"<thead><tr>{head}</tr></thead>" if header else ""
    out.append(f'<div class="scroll"><table>{thead}<tbody>{body}</tbody></table></div>')
    return index


def inline_markdown(text: str) -> str:
    """Code spans verbatim (escaped); elsewhere links, **strong** and *em* on escaped text."""
    parts: list[str] = []
    position = 0
    for match in _CODE_SPAN.finditer(text):
        parts.append(_inline_text(text[position : match.start()]))
        parts.append(f"<code>{escape(match.group(2).strip())}</code>")
        position = match.end()
    parts.append(_inline_text(text[position:]))
    return "".join(parts)


def _inline_text(text: str) -> str:
    html = str(escape(text))
    html = _LINK.sub(r'<a href="\2" rel="noopener noreferrer">\1</a>', html)
    html = _STRONG.sub(r"<strong>\1</strong>", html)
    return _EM.sub(r"<em>\1</em>", html)


# --------------------------------------------------------------------------- badges

_BADGE_COLORS: Final = {
    "tone-bad": "#c0392b",
    "tone-warn": "#b35c00",
    "tone-info": "#1f6feb",
    "tone-good": "#2a7d2e",
    "tone-neutral": "#6a737d",
}
_CHAR_PX: Final = 7
_PAD_PX: Final = 10


def badge_svg(label: str, message: str, color: str) -> str:
    """A shields-like flat badge: grey label, coloured message, both as real text."""
    left = len(label) * _CHAR_PX + 2 * _PAD_PX
    right = len(message) * _CHAR_PX + 2 * _PAD_PX
    width = left + right
    title = xml_escape(f"{label}: {message}")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" role="img" '
        f'aria-label="{title}"><title>{title}</title>'
        f'<clipPath id="r"><rect width="{width}" height="20" rx="3" fill="#fff"/></clipPath>'
        f'<g clip-path="url(#r)"><rect width="{left}" height="20" fill="#555"/>'
        f'<rect x="{left}" width="{right}" height="20" fill="{color}"/></g>'
        '<g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" '
        f'font-size="11"><text x="{left / 2}" y="14">{xml_escape(label)}</text>'
        f'<text x="{left + right / 2}" y="14">{xml_escape(message)}</text></g></svg>'
    )


def series_badge_word(series: SeriesSummaryOut) -> str:
    """The one word that says most about a series, most urgent first."""
    statuses = {p.status for p in series.patches}
    ci = {c.state for c in series.ci.values()}
    for word, present in (
        ("error", series.phase == "error"),
        ("conflict", "conflict" in statuses),
        ("invalid", "invalid" in statuses),
        ("review", any(p.decision == "review" for p in series.patches)),
        ("failure", bool(ci & {"failure", "infra-error"})),
        ("waiting-approval", "waiting-approval" in ci),
        ("inconclusive", "inconclusive" in ci),
    ):
        if present:
            return word
    if series.phase != "idle" or series.outcome == "none":
        return series.phase
    return series.outcome


def patch_badge_word(patch: PatchOut) -> str:
    return patch.status if patch.decision == "none" else f"{patch.status}, {patch.decision}"


def svg_response(label: str, message: str, word: str, status_code: int = 200) -> Response:
    color = _BADGE_COLORS[tone(word)]
    headers = {"Cache-Control": "no-cache, max-age=0", "X-Content-Type-Options": "nosniff"}
    return Response(
        badge_svg(label, message, color),
        status_code=status_code,
        media_type="image/svg+xml",
        headers=headers,
    )


# --------------------------------------------------------------------------- live updates

_ASYNC_CONNECTIONS: Final = {
    "Connection": aioredis.Connection,
    "SSLConnection": aioredis.SSLConnection,
    "UnixDomainSocketConnection": aioredis.UnixDomainSocketConnection,
}
_ASYNC_KWARGS: Final = frozenset(
    {"host", "port", "db", "username", "password", "path", "client_name"}
    | {"ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname"}
)


def async_client_like(client: redis.Redis) -> aioredis.Redis:
    """An asyncio client for the server and database of `client` (for pub/sub that must not
    hold a thread while it waits)."""
    pool = client.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in _ASYNC_KWARGS}
    kind = _ASYNC_CONNECTIONS.get(pool.connection_class.__name__, aioredis.Connection)
    return aioredis.Redis(connection_pool=aioredis.ConnectionPool(connection_class=kind, **kwargs))


@dataclass
class LiveStream:
    """Relays UPDATES_CHANNEL to one browser as server-sent events."""

    client: aioredis.Redis
    heartbeat_s: float = 15.0
    max_age_s: float = 600.0  # then the browser's EventSource reconnects by itself
    subscribe_timeout_s: float = 5.0

    async def open(self) -> aioredis.client.PubSub:
        """Subscribe and wait for Redis to confirm, so nothing published after the browser
        sees the stream open can be missed."""
        pubsub = self.client.pubsub()
        try:
            await pubsub.subscribe(UPDATES_CHANNEL)
            with anyio.fail_after(self.subscribe_timeout_s):
                while True:
                    message = await pubsub.get_message(timeout=self.subscribe_timeout_s)
                    if message is not None and message.get("type") == "subscribe":
                        return pubsub
        except BaseException:
            await _close(pubsub)
            raise

    async def events(self, pubsub: aioredis.client.PubSub) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        started = quiet_since = loop.time()
        try:
            yield "retry: 3000\n: connected\n\n"
            while loop.time() - started < self.max_age_s:
                wait = min(1.0, self.heartbeat_s)
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=wait)
                if message is not None:
                    quiet_since = loop.time()
                    yield sse_data(message.get("data"))
                elif loop.time() - quiet_since >= self.heartbeat_s:
                    quiet_since = loop.time()
                    yield ": keepalive\n\n"
        finally:
            await _close(pubsub)


async def _close(pubsub: aioredis.client.PubSub) -> None:
    with anyio.CancelScope(shield=True):
        await pubsub.aclose()  # type: ignore[attr-defined]  # types-redis 4.6 lacks it


def sse_data(payload: Any) -> str:
    text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(payload)
    return "".join(f"data: {line}\n" for line in text.split("\n")) + "\n"


# --------------------------------------------------------------------------- page rendering


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        tone=tone,
        url_series=lambda sid: f"/series/{quote(sid, safe='')}",
        url_patch=lambda sid, name: f"/series/{quote(sid, safe='')}/patches/{quote(name, safe='')}",
        url_run=lambda rid: f"/runs/{quote(rid, safe='')}",
        markdown=render_markdown,
        step_of=PublishStep.from_fields,
        ago=lambda iso: age_text(age_seconds(iso)) or iso,
    )
    env.filters["short"] = lambda sha: (sha or "")[:12]
    env.filters["ref_words"] = ref_words
    env.filters["words"] = field_words
    return env


def ref_words(ref: str) -> str:
    """refs/tags/v1 -> 'tag v1' (a pattern: 'a tag matching v1.*'), refs/heads/b -> 'branch b'."""
    if ref.startswith("refs/tags/"):
        tag = ref.removeprefix("refs/tags/")
        return f"a tag matching {tag}" if any(c in tag for c in "*?[") else f"tag {tag}"
    if ref.startswith("refs/heads/"):
        return f"branch {ref.removeprefix('refs/heads/')}"
    return ref


@dataclass(frozen=True)
class Live:
    """What a page's live region listens to: one series ('' = all), one run's log, a poll."""

    series: str = ""
    run: str = ""
    poll_s: int = 0


@dataclass
class Pages:
    env: jinja2.Environment = field(default_factory=_environment)
    # said on every page: the dashboard is open beyond this machine (bot.web.access)
    exposure: str | None = None

    def render(
        self, name: str, *, title: str, nav: str = "", status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        context.setdefault("live", Live())
        context.setdefault("exposure", self.exposure)
        html = self.env.get_template(name).render(title=title, nav=nav, **context)
        return HTMLResponse(html, status_code=status_code, headers=_HEADERS)

    def not_found(self, exc: Exception) -> HTMLResponse:
        return self.render("message.html", title="Not found", message=str(exc), status_code=404)

    def macro(self, template: str, name: str, *args: Any) -> Markup:
        """One macro of a template, called as a page would call it (the pages' globals)."""
        found = getattr(self.env.get_template(template).module, name)
        return Markup(found(*args))


# A series of more patches than this shows them counted by status and decision on the overview,
# with the chips of those that need attention; its page lists every patch. At 200 series of 30
# patches a chip each made the overview 3 MB of HTML and most of a second to render.
CHIPS_AT_MOST: Final = 10


@dataclass(frozen=True)
class Tally:
    status: str
    decision: str
    count: int


@dataclass(frozen=True)
class PatchesCell:
    """What the Patches cell of a series' overview row shows: every patch as a chip (`tally`
    empty), or for a long series how many patches have each status and decision (in order of
    their first patch) and the chips of those that need attention (at most CHIPS_AT_MOST)."""

    shown: list[PatchOut]
    tally: list[Tally]

    @property
    def parts(self) -> tuple[list[PatchOut], list[Tally]]:
        return self.shown, self.tally

    @classmethod
    def of(cls, s: SeriesSummaryOut) -> PatchesCell:
        if len(s.patches) <= CHIPS_AT_MOST:
            return cls(list(s.patches), [])
        counts = Counter((p.status, p.decision) for p in s.patches)
        tally = [Tally(status, decision, n) for (status, decision), n in counts.items()]
        needs = [p for p in s.patches if p.needs_attention]
        return cls(needs[:CHIPS_AT_MOST], tally)


@dataclass(frozen=True)
class Matrix:
    """The overview: one row per series, its patches and CI rows as chips in their own cells
    (a column per patch name made a cross-product of every series' patches)."""

    series: list[SeriesSummaryOut]
    attention: list[AttentionOut]
    # series id -> its row's words for the filter, where already known (kept with the series)
    words: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, listed: SeriesListOut, words: Mapping[str, str] | None = None) -> Matrix:
        """carry's own health first (it holds every series back), then each series'."""
        series = listed.series
        attention = [*listed.health, *(item for s in series for item in s.attention)]
        return cls(series, attention, words or {})

    def shown(self, text: str, sort: str) -> list[SeriesSummaryOut]:
        """The rows whose series, base, state, patches or CI rows contain `text` (any case),
        in `sort` order; "attention" (the default) keeps those that need attention first."""
        needle = text.strip().lower()
        rows = [
            s
            for s in self.series
            if not needle or needle in (self.words.get(s.id) or _row_words(s))
        ]
        if sort == "id":
            return sorted(rows, key=lambda s: s.id)
        if sort == "head":  # the head seen most recently first; none yet last
            return sorted(rows, key=lambda s: (s.head.age_s is None, s.head.age_s or 0, s.id))
        return rows


OVERVIEW_SORTS: Final = ("attention", "id", "head")


def _row_words(series: SeriesSummaryOut) -> str:
    words = [series.id, series.base, series.phase, series.outcome, *series.needs_attention]
    for patch in series.patches:
        words += [patch.name, patch.status, patch.decision, *(u.ref for u in patch.upstream)]
    words += [f"{kind} {row.state}" for kind, row in series.ci.items()]
    return " ".join(words).lower()


# --------------------------------------------------------------------------- access for pages


def _without_token(request: Request) -> str:
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    return request.url.path + (f"?{urlencode(query)}" if query else "")


def page_access(access: Access) -> params.Depends:
    """Like the API's check; a valid ?token= sets the session cookie and redirects to the same
    page without the token, so it stays out of the address bar, history and page links."""

    def check(request: Request) -> None:
        if access.check(request) != "query":
            return
        secure = "; Secure" if request.url.scheme == "https" else ""
        cookie = f"{SESSION_COOKIE}={access.session_value()}; Path=/; HttpOnly; SameSite=Lax"
        raise HTTPException(
            status_code=303,
            detail="token accepted",
            headers={"Location": _without_token(request), "Set-Cookie": cookie + secure},
        )

    return Depends(check)


def store_unavailable(request: Request, exc: Exception) -> Response:
    """503 for a store that does not answer: JSON for the API, a page for people."""
    message = f"carry's store is unavailable ({type(exc).__name__}); try again shortly"
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=503)
    return Pages().render("message.html", title="Unavailable", message=message, status_code=503)


def not_found(pages: Pages) -> Callable[[Request, Exception], Response]:
    """The one 404 for an unknown series, patch or run: JSON for the API, a page for people."""

    def answer(request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=404)
        return pages.not_found(exc)

    return answer


# --------------------------------------------------------------------------- routes


OVERVIEW_ROWS: Final = "_overview.html"


def _ago(iso: str | None) -> str | None:
    return age_text(age_seconds(iso)) or iso


@dataclass
class RowParts:
    """What the overview shows of one series, as HTML (see Dashboard.overview)."""

    row: Markup
    attention: Markup
    words: str


@dataclass
class Dashboard:
    client: redis.Redis
    config: CarryConfig | None
    fix_pages: FixPages
    pages: Pages = field(default_factory=Pages)
    # each series' summary and its row's parts, kept while the series is unchanged
    summaries: SeriesCache[SeriesSummaryOut] = field(default_factory=SeriesCache)

    def overview(self, text: str = "", sort: str = "attention") -> HTMLResponse:
        """Each series' parts of the page (its row, its Patches cell, its attention items, its
        words for the filter) are rendered once per change of the series (its stored document
        or its directory, bot.web.series_cache) and of the ages they show; a request renders
        only what changed and joins the rest."""
        entries = kept_summaries(self.client, self.fix_pages, self.summaries)
        listed = listing(self.client, self.config, [entry.value for entry in entries])
        parts = {entry.value.id: self._parts(entry.value, entry.derived) for entry in entries}
        matrix = Matrix.of(listed, {sid: part.words for sid, part in parts.items()})
        health = [self.pages.macro(OVERVIEW_ROWS, "attention_row", a) for a in listed.health]
        return self.pages.render(
            "overview.html",
            title="Overview",
            nav="overview",
            json_url="/api/v1/series",
            matrix=matrix,
            rows=matrix.shown(text, sort),
            attention_rows=[
                *health,
                *(parts[s.id].attention for s in listed.series if s.attention),
            ],
            series_rows={sid: part.row for sid, part in parts.items()},
            shown={"q": text, "sort": sort},
            sorts=OVERVIEW_SORTS,
            recent=series_history(self.client, None, 10).entries,
        )

    def _parts(self, s: SeriesSummaryOut, kept: dict[str, Any]) -> RowParts:
        """The series' row and attention items, from `kept` (what is kept with the series:
        bot.web.series_cache.Kept.derived) where the ages they show are the same."""
        if "patches" not in kept:  # the same for as long as the series is
            cell = PatchesCell.of(s)
            kept["words"] = _row_words(s)  # before "patches", which says both are there
            kept["patches"] = self.pages.macro("_macros.html", "patches_cell", s, *cell.parts)
        ages = {"seen": s.head.age or _ago(s.head.seen_at)}
        ages |= {"checked": _ago(s.checked_at), "updated": _ago(s.updated_at)}
        row = kept.get("row")
        if row is None or row[0] != ages:
            html = self.pages.macro(OVERVIEW_ROWS, "series_row", s, ages, kept["patches"])
            row = kept["row"] = (ages, html)
        since = [a.age for a in s.attention]
        attention = kept.get("attention")
        if attention is None or attention[0] != since:
            rows = [self.pages.macro(OVERVIEW_ROWS, "attention_row", a) for a in s.attention]
            attention = kept["attention"] = (since, Markup("\n").join(rows))
        return RowParts(row[1], attention[1], kept["words"])

    def series(self, series_id: str) -> HTMLResponse:
        timeline = series_history(self.client, series_id, 200).entries
        return self.pages.render(
            "series.html",
            title=series_id,
            json_url=f"/api/v1/series/{quote(series_id, safe='')}",
            s=series_detail(self.client, series_id, self.fix_pages),
            timeline=timeline,
            heads=by_head(timeline),
            proposal=next((e for e in timeline if e.kind == "proposal"), None),
            live=Live(series=series_id),
        )

    def patch(self, series_id: str, name: str) -> HTMLResponse:
        detail = patch_detail(self.client, self.fix_pages, series_id, name)
        state = load_series(self.client, series_id)
        repo, host = (state.upstream_repo, web_host(state)) if state is not None else ("", "")
        return self.pages.render(
            "patch.html",
            title=f"{name} · {series_id}",
            json_url=f"/api/v1/series/{quote(series_id, safe='')}/patches/{quote(name, safe='')}",
            d=detail,
            w=worksheet(detail.patch.evidence, detail.patch.conflict, commit_link(repo, host)),
            landings=landings(
                detail.patch.upstream_commits,
                commit_link(repo, host),
                lambda number: pr_url(f"{repo}#{number}", host),
            ),
            interdiff=diff_lines(detail.patch.interdiff),
            live=Live(series=series_id),
        )

    def run(self, run_id: str) -> HTMLResponse:
        run = find_run(self.client, run_id)
        return self.pages.render(
            "run.html",
            title=f"Run {run_id}",
            json_url=f"/api/v1/runs/{quote(run_id, safe='')}/log",
            run=run,
            log=run_log(self.client, run_id, "-", limit=RUN_LOG_LINES),
            live=Live(series=run.series or "", run=run_id),
        )

    def runs(self, chosen: RunsQuery, page: int) -> HTMLResponse:
        """Every hardware run, newest first, a page at a time, filtered as the query says."""
        view = runs_view(self.client, chosen.filters(), page)
        query = {k: v for k, v in view.filters.model_dump().items() if v}

        def page_url(number: int) -> str:
            return "/runs?" + urlencode({**query, "page": number})

        return self.pages.render(
            "runs.html",
            title="Runs",
            nav="runs",
            json_url="/api/v1/runs"
            + (f"?{urlencode({**query, 'page': page})}" if query or page > 1 else ""),
            view=view,
            newer=page_url(page - 1) if page > 1 else None,
            older=page_url(page + 1) if page < view.pages else None,
            live=Live(poll_s=15),
        )

    def runners(self) -> HTMLResponse:
        return self.pages.render(
            "runners.html",
            title="Runners",
            nav="runners",
            json_url="/api/v1/runners",
            view=runners_view(self.client, self.config),
            live=Live(poll_s=15),
        )

    def events(
        self,
        series: str | None,
        kind: str | None,
        before: str | None,
        outcome: Outcome | None = None,
    ) -> HTMLResponse:
        """The history of every series (or one), newest first, a page at a time; webhook
        deliveries on the first page."""
        found = series_history(
            self.client, series, EVENTS_PAGE, before=before, kind=kind, outcome=outcome
        )
        first = before is None
        deliveries = [d.to_json() for d in recent_deliveries(self.client, 50)] if first else []
        shown = {"series": series, "kind": kind, "outcome": outcome}
        chosen = {k: v for k, v in shown.items() if v}
        query = urlencode(chosen)
        older = None
        if found.next_before:
            older = "/events?" + urlencode({**chosen, "before": found.next_before})
        return self.pages.render(
            "events.html",
            title="Events",
            nav="events",
            json_url=f"/api/v1/history?{query}" if query else "/api/v1/history",
            entries=found.entries,
            deliveries=deliveries,
            first_page=first,
            shown=shown,
            outcomes=OUTCOME_WORDS,
            series_ids=sorted(s.id for s in all_series(self.client)),
            older=older,
            live=Live(poll_s=15) if first else Live(),
        )

    def series_badge(self, series_id: str) -> Response:
        state = load_series(self.client, series_id)
        if state is None:
            return svg_response(series_id, "unknown", "unknown", status_code=404)
        word = series_badge_word(series_summary(state))
        return svg_response(series_id, word, word)

    def good_badge(self, series_id: str) -> Response:
        """The last known good head: green with its SHA, red while the series is red."""
        state = load_series(self.client, series_id)
        if state is None:
            return svg_response(series_id, "unknown", "unknown", status_code=404)
        label = f"{series_id} last good"
        good = state.last_good.head[:12] if state.last_good else "none yet"
        if state.red_streak is not None:
            return svg_response(label, f"{good} (red since {state.red_streak.head[:12]})", "red")
        return svg_response(label, good, "green" if state.last_good else "unknown")

    def patch_badge(self, series_id: str, name: str) -> Response:
        state = load_series(self.client, series_id)
        patch = state.patch(name) if state else None
        if state is None or patch is None:
            return svg_response(name, "unknown", "unknown", status_code=404)
        word = patch_badge_word(patch_out(patch, None, web_host(state)))
        return svg_response(name, word, patch.status)


def dashboard_router(
    client: redis.Redis,
    access: Access,
    config: CarryConfig | None,
    fix_pages: FixPages,
    *,
    live: LiveStream | None = None,
    exposure: str | None = None,
) -> APIRouter:
    """HTML pages, the live event stream and the badges (all GET, all read-only)."""
    board = Dashboard(client, config, fix_pages, Pages(exposure=exposure))
    stream = live or LiveStream(async_client_like(client))
    router = APIRouter(include_in_schema=False)
    pages = [page_access(access)]

    @router.get("/", dependencies=pages)
    def overview(
        q: Annotated[str, Query(max_length=200)] = "",
        sort: Annotated[Literal["attention", "id", "head"], Query()] = "attention",
    ) -> HTMLResponse:
        return board.overview(q, sort)

    @router.get("/series/{series_id}", dependencies=pages)
    def series(series_id: str) -> HTMLResponse:
        return board.series(series_id)

    @router.get("/series/{series_id}/patches/{name}", dependencies=pages)
    def patch(series_id: str, name: str) -> HTMLResponse:
        return board.patch(series_id, name)

    @router.get("/runs/{run_id}", dependencies=pages)
    def run(run_id: str) -> HTMLResponse:
        return board.run(run_id)

    @router.get("/runs", dependencies=pages)
    def runs(
        chosen: Annotated[RunsQuery, Query()],
        page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    ) -> HTMLResponse:
        return board.runs(chosen, page)

    @router.get("/runners", dependencies=pages)
    def runners() -> HTMLResponse:
        return board.runners()

    @router.get("/events", dependencies=pages)
    def events(
        series: Annotated[str | None, Query(max_length=200)] = None,
        kind: Annotated[str | None, Query(max_length=100)] = None,
        outcome: Annotated[Outcome | Literal[""] | None, Query()] = None,  # "": any outcome
        before: Annotated[str | None, Query(pattern=r"^[0-9]+-[0-9]+$", max_length=40)] = None,
    ) -> HTMLResponse:
        chosen = outcome or None
        return board.events(series or None, kind or None, before, chosen)

    @router.get("/events/stream", dependencies=[access.dependency()])
    async def event_stream() -> StreamingResponse:
        pubsub = await stream.open()
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(
            stream.events(pubsub), media_type="text/event-stream", headers=headers
        )

    @router.get("/badges/series/{series_id}.svg", dependencies=[access.dependency()])
    def series_badge(series_id: str) -> Response:
        return board.series_badge(series_id)

    @router.get("/badges/series/{series_id}/good.svg", dependencies=[access.dependency()])
    def good_badge(series_id: str) -> Response:
        return board.good_badge(series_id)

    @router.get("/badges/series/{series_id}/patches/{name}.svg", dependencies=[access.dependency()])
    def patch_badge(series_id: str, name: str) -> Response:
        return board.patch_badge(series_id, name)

    return router


def install_dashboard(
    app: FastAPI,
    client: redis.Redis,
    access: Access,
    config: CarryConfig | None,
    fix_pages: FixPages,
    exposure: str | None = None,
) -> None:
    """Add the pages, the stream, the badges and /static to `app`, and a 503 for a dead store."""
    app.include_router(dashboard_router(client, access, config, fix_pages, exposure=exposure))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_exception_handler(redis.RedisError, store_unavailable)
    app.add_exception_handler(NotFound, not_found(Pages(exposure=exposure)))
