"""Round-trip every file in samples/ through codec.py and print the sizes (as the grader does,
minus its process isolation)."""

from pathlib import Path

import codec

total_in = total_out = 0
for path in sorted(Path("samples").iterdir()):
    data = path.read_bytes()
    packed = codec.compress(data)
    ok = codec.decompress(packed) == data
    size = len(packed) if ok else len(data)
    total_in, total_out = total_in + len(data), total_out + size
    print(f"{path.name:14} {len(data):8} -> {size:8} {'ok' if ok else 'ROUND TRIP FAILED'}")
print(f"{'total':14} {total_in:8} -> {total_out:8}")
