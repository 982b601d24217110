#!/bin/bash
set -e
root=$(mktemp -d)
install -D -m 0755 /app/hello-ahe/hello-ahe "$root/usr/bin/hello-ahe"
install -D -m 0644 /app/hello-ahe/hello.conf "$root/etc/hello-ahe/hello.conf"
mkdir -p "$root/DEBIAN"
cat > "$root/DEBIAN/control" <<'CTL'
Package: hello-ahe
Version: 1.2.0
Architecture: all
Maintainer: Bench Team <bench@example.org>
Depends: bash
Section: utils
Priority: optional
Description: prints a configurable greeting
 hello-ahe prints the greeting set in /etc/hello-ahe/hello.conf.
CTL
echo /etc/hello-ahe/hello.conf > "$root/DEBIAN/conffiles"
chmod 0755 "$root" "$root/DEBIAN" "$root/usr" "$root/usr/bin" "$root/etc" "$root/etc/hello-ahe"
mkdir -p /app/out
dpkg-deb --root-owner-group --build "$root" /app/out/hello-ahe_1.2.0_all.deb
