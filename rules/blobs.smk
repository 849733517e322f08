# Blobs are file targets inside the task directories: fetched by sha256 when missing.

BLOBS = {f"{t.id}/{b.path}": (t.id, b) for t in P.bench.tasks.values() for b in t.blobs}


rule blob:
    output:
        str(P.bench.root / "tasks" / "{blob}"),
    log:
        str(P.layout.blob_log("{blob}")),
    wildcard_constraints:
        blob="|".join(__import__("re").escape(k) for k in sorted(BLOBS)) or "(?!)",
    run:
        T.fetch_blob_target(P, *BLOBS[wildcards.blob], log=log[0])
