#!/bin/bash
# Creates /app/site with deliberately messy permissions.
set -e
mkdir -p /app/site/{public/css,public/img,bin,private/keys,logs}
cd /app/site
printf '<h1>site</h1>\n' > public/index.html
printf 'body{}\n' > public/css/main.css
printf 'PNG\n' > public/img/logo.png
printf '#!/bin/bash\necho deploying\n' > bin/deploy.sh
printf '#!/bin/bash\necho rotating\n' > bin/rotate-logs
printf 'admin:$apr1$xyz\n' > private/.htpasswd
printf -- '-----BEGIN KEY-----\n' > private/keys/server.key
printf 'started\n' > logs/app.log
printf 'site config\n' > site.conf
chmod -R 777 /app/site
chmod 600 public/css/main.css
chmod 711 public/img
chmod 644 bin/deploy.sh
chmod 666 private/keys/server.key
