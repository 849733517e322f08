# Aggregation: the tables (scores.csv, best.csv, leaderboard, budgets) and report.html with its
# task pages, made in one job the way `sforge report` makes them (per-task parts; only the
# tasks whose results, submissions or task.toml changed are computed again). The outputs are
# update()-flagged: the job brings them up to date from its stores, Snakemake never deletes
# them first. `scores`, `best` and `leaderboard` name the same job by its products.


rule report:
    input:
        results=lambda w: sorted({str(p) for _, p in P.records()}),
        archives=lambda w: [str(s.path) for s in P.submissions()],
        tasks=[str(t.toml_path) for t in P.bench.tasks.values()],
    output:
        scores=update(str(L.scores)),
        best=update(str(L.best)),
        leaderboard=update(str(L.leaderboard)),
        leaderboard_md=update(str(L.leaderboard_md)),
        budgets=update(str(L.budgets)),
        html=update(str(L.report)),
        pages=update(directory(str(L.report_pages))),
    log:
        scores=str(L.step_log("scores")),
        best=str(L.step_log("best")),
        leaderboard=str(L.step_log("leaderboard")),
        report=str(L.step_log("report")),
    run:
        T.report_target(P, output, log)


rule scores:
    input:
        str(L.scores),


rule best:
    input:
        str(L.best),


rule leaderboard:
    input:
        str(L.leaderboard),
        str(L.leaderboard_md),
        str(L.budgets),
