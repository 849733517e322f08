# Aggregation: scores.csv → best.csv → leaderboard → report.html, rebuilt when a result,
# a submission or a task.toml changes.


rule scores:
    input:
        results=lambda w: sorted({str(p) for _, p in P.records()}),
        archives=lambda w: [str(s.path) for s in P.submissions()],
        tasks=[str(t.toml_path) for t in P.bench.tasks.values()],
    output:
        str(P.layout.scores),
    log:
        str(P.layout.step_log("scores")),
    run:
        T.write_scores_target(P, log=log[0])


rule best:
    input:
        str(P.layout.scores),
    output:
        str(P.layout.best),
    log:
        str(P.layout.step_log("best")),
    run:
        T.write_best_target(P, log=log[0])


rule leaderboard:
    input:
        str(P.layout.best),
    output:
        csv=str(P.layout.leaderboard),
        md=str(P.layout.leaderboard_md),
        budgets=str(P.layout.budgets),
    log:
        str(P.layout.step_log("leaderboard")),
    run:
        T.write_leaderboard_target(P, log=log[0])


rule report:
    input:
        rules.leaderboard.output,
    output:
        html=str(P.layout.report),
        pages=directory(str(P.layout.report_pages)),
    log:
        str(P.layout.step_log("report")),
    run:
        T.write_report_target(P, log=log[0])
