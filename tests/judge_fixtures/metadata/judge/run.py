"""Writes every path under cwd with its mode, owner and xattrs into result.json's details."""
import json
import os

details = []
for root, dirs, files in os.walk("."):
    for name in sorted(dirs + files):
        path = os.path.join(root, name)
        st = os.lstat(path)
        xattrs = {} if os.path.islink(path) else {
            k: os.getxattr(path, k).hex() for k in sorted(os.listxattr(path))}
        details.append({"name": path[2:], "mode": oct(st.st_mode), "uid": st.st_uid,
                        "gid": st.st_gid, "xattrs": xattrs})
details.sort(key=lambda d: d["name"])
with open("/opt/sforge/result.json", "w") as fh:
    json.dump({"valid": True, "score": len(details), "summary": "metadata", "details": details},
              fh)
