#!/bin/bash
mkdir -p shared
chgrp research shared
chmod 2770 shared
setfacl -d -m g:research:rwx shared
