#!/bin/sh
r=/opt/sforge/result.json
ok='{"valid": true, "score": 1, "summary": "plain"}'
case "$(cat shape.txt 2>/dev/null)" in
  symlink) ln -s /judge/real.json "$r" ;;
  dangling) ln -s /nowhere "$r" ;;
  dir) mkdir "$r" ;;
  fifo) mkfifo "$r" ;;
  big) head -c 17000000 /dev/zero > "$r" ;;
  cap) { printf '{"valid": true, "score": 2, "summary": "'; head -c 16777000 /dev/zero | tr '\0' a;
         printf '"}'; } > "$r" ;;
  none) ;;
  exit3) echo "$ok" > "$r"; exit 3 ;;
  # tampering with where sforge reads the result from: it must not decide the verdict
  # (mkdir: the same run whether or not the directory is mounted)
  kind-dir) echo "$ok" > "$r"; mkdir -p /run/sforge-out/kind ;;
  kind-link) echo "$ok" > "$r"; mkdir -p /run/sforge-out
             ln -s /judge/real.json /run/sforge-out/result.json ;;
  forge-out) echo "$ok" > "$r"; mkdir -p /run/sforge-out
             echo '{"valid": true, "score": 1e9}' > /run/sforge-out/result.json
             echo file > /run/sforge-out/kind ;;
  *) echo "$ok" > "$r" ;;
esac
