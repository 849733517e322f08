# Aggregation: scores.csv → best.csv → leaderboard → report.html, rebuilt when a result,
# a submission or a task.toml changes.


rule scores:
    input:
        results=lambda w: sorted({str(p) for _, p in P.records()}),
        archives=lambda w: [str(s.path) for s in P.submissions()],
        tasks=[str(t.toml_path) for t in P.bench.tasks.values()],
    output:
        str(P.layout.scores),
    run:
        T.write_scores_target(P)


rule best:
    input:
        str(P.layout.scores),
    output:
        str(P.layout.best),
    run:
        T.write_best_target(P)


rule leaderboard:
    input:
        str(P.layout.best),
    output:
        csv=str(P.layout.leaderboard),
        md=str(P.layout.leaderboard_md),
        budgets=str(P.layout.budgets),
    run:
        T.write_leaderboard_target(P)


rule report:
    input:
        rules.leaderboard.output,
    output:
        str(P.layout.report),
    run:
        T.write_report_target(P)
