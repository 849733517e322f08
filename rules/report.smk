# Aggregation: scores.csv → best.csv → leaderboard → report.html, rebuilt when a result,
# a submission or a task.toml changes.


rule scores:
    input:
        results=lambda w: sorted({str(p) for _, p in P.records()}),
        archives=lambda w: [str(s.path) for s in P.submissions()],
        tasks=[str(t.toml_path) for t in P.bench.tasks.values()],
    output:
        str(L.scores),
    log:
        str(L.step_log("scores")),
    run:
        T.write_scores_target(P, output[0], log=log[0])


rule best:
    input:
        str(L.scores),
    output:
        str(L.best),
    log:
        str(L.step_log("best")),
    run:
        T.write_best_target(P, input[0], output[0], log=log[0])


rule leaderboard:
    input:
        best=str(L.best),
        scores=str(L.scores),
    output:
        csv=str(L.leaderboard),
        md=str(L.leaderboard_md),
        budgets=str(L.budgets),
    log:
        str(L.step_log("leaderboard")),
    run:
        T.write_leaderboard_target(
            P, input.best, input.scores, output.csv, output.md, output.budgets, log=log[0]
        )


rule report:
    input:
        scores=str(L.scores),
        best=str(L.best),
        leaderboard=str(L.leaderboard),
        budgets=str(L.budgets),
    output:
        html=str(L.report),
        pages=directory(str(L.report_pages)),
    log:
        str(L.step_log("report")),
    run:
        T.write_report_target(
            P,
            input.scores,
            input.best,
            input.leaderboard,
            input.budgets,
            output.html,
            log=log[0],
        )
