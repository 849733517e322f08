import grp
import os
import stat
import subprocess

SHARED = "/app/shared"


def test_group_is_research():
    assert os.stat(SHARED).st_gid == grp.getgrnam("research").gr_gid


def test_mode_is_2770():
    assert stat.S_IMODE(os.stat(SHARED).st_mode) == 0o2770


def test_default_acl_gives_the_group_rwx():
    out = subprocess.run(["getfacl", "-c", SHARED], capture_output=True, text=True).stdout
    assert "default:group:research:rwx" in out.splitlines()
