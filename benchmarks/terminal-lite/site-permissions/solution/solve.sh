#!/bin/bash
set -e
cd /app/site
find . -type d -exec chmod 755 {} +
find . -type f -exec chmod 644 {} +
find bin -maxdepth 1 -type f -exec chmod 755 {} +
find private -type d -exec chmod 700 {} +
find private -type f -exec chmod 600 {} +
