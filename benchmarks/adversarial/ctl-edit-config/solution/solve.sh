#!/bin/bash
set -e
sed -i 's/mode=off/mode=on/' /root/.config/demo/demo.ini
echo ahe-token-7c1d2f > /app/answer.txt
