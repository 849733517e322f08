# Blobs are file targets inside the task directories: fetched by sha256 when missing.

BLOBS = sorted(f"{t.id}/{b.path}" for t in P.bench.tasks.values() for b in t.blobs)


rule blob:
    output:
        str(P.bench.root / "tasks" / "{blob}"),
    log:
        str(P.layout.blob_log("{blob}")),
    wildcard_constraints:
        blob="|".join(__import__("re").escape(k) for k in BLOBS) or "(?!)",
    run:
        T.fetch_blob_target(P, output[0], log=log[0])
