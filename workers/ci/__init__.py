"""Hardware CI, the service side: requests (ask for runs, cancel, reuse, approve, release the
budget's deferred runs, end a run), rows (the CI rows a run writes into its series and
reports), reports (apply what the runners report) and github (ask for runs of a PR's tree, put
their results on GitHub). The runner host's side is the top-level `runner` package; the job
and the run record both sides share are bot/ci."""
