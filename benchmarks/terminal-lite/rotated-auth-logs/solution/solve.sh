#!/bin/bash
zcat -f /app/logs/auth.log* | grep -oE 'Accepted [a-z-]+ for [^ ]+ from' | awk '{ print $4 }' \
  | sort -u > /app/users.txt
