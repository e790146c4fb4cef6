#!/usr/bin/env bash
# Provides a MySQL server for the tests (`make setup` runs this). An installed MySQL
# mysqld (8.4 or 9.x, not MariaDB's mysqld) is used as it is. Otherwise this builds,
# once, a minimal Debian unstable root holding mysql-server-core into the cache folder
# that internal/sandbox looks in, from the Debian mirror apt already uses here.
# Idempotent: a complete root is reused; a build goes to a temp dir renamed when done,
# so an interrupted build is never taken for a good one.
set -euo pipefail

cache="${XDG_CACHE_HOME:-$HOME/.cache}/rowlift"
root="$cache/mysql-root"
# Written last into a finished root; internal/sandbox only uses roots that have it.
marker=".rowlift-complete"

for dir in ${PATH//:/ } /usr/sbin /usr/local/sbin /usr/local/mysql/bin; do
	if [ -x "$dir/mysqld" ] && version=$("$dir/mysqld" --version 2>/dev/null) &&
		! grep -q MariaDB <<<"$version" && grep -Eq 'Ver (8\.4|9)\.' <<<"$version"; then
		echo "mysql: using the installed $dir/mysqld ($version)"
		exit 0
	fi
done

if [ -f "$root/$marker" ]; then
	echo "mysql: using the MySQL root in $root ($(cat "$root/$marker"))"
	exit 0
fi

SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
if ! command -v debootstrap >/dev/null 2>&1 && [ ! -x /usr/sbin/debootstrap ]; then
	echo "mysql: installing debootstrap (to build a MySQL root: no MySQL 8.4+ package for this system)"
	$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q debootstrap
fi

# The mirror apt uses: the first Debian archive (not the security one) in the system's
# sources, one-line (sources.list) or deb822 (*.sources, URIs:).
mirror=$(
	{
		cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			sed -nE 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p'
		cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -nE 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'
	} | grep -E '^https?://' | grep -v -- '-security' | grep -E '/debian(/|$)' | head -1
)
if [ -z "$mirror" ]; then
	echo "mysql: no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources;" >&2
	echo "mysql: install MySQL 8.4 or 9.x (a mysqld on PATH or in /usr/sbin) and run make setup again" >&2
	exit 1
fi

mkdir -p "$cache"
# Leftovers of interrupted builds (never a mount: debootstrap unmounts on exit, and
# --one-file-system keeps rm from crossing one that stayed).
$SUDO rm -rf --one-file-system "$cache"/mysql-root.build.*
build=$(mktemp -d "$cache/mysql-root.build.XXXXXX")
trap '$SUDO rm -rf --one-file-system "$build"' EXIT
echo "mysql: building a Debian unstable root with mysql-server-core from $mirror"
echo "mysql: into $root (about 650 MB, a few minutes; done once, reused while it exists)"
start=$(date +%s)
if ! $SUDO debootstrap --variant=minbase --include=mysql-server-core,mysql-client-core \
	sid "$build" "$mirror" >"$build.log" 2>&1; then
	tail -n 30 "$build.log" >&2
	echo "mysql: debootstrap failed (full log: $build.log)" >&2
	exit 1
fi
rm -f "$build.log"
version=$($SUDO chroot "$build" /usr/sbin/mysqld --version)
elapsed=$(($(date +%s) - start))
size=$(du -sh --one-file-system "$build" | cut -f1)
$SUDO chmod 755 "$build" # mktemp made it private; tests may run as another user
echo "$version; built in ${elapsed}s from $mirror, $size" | $SUDO tee "$build/$marker" >/dev/null
$SUDO mv "$build" "$root"
trap - EXIT
echo "mysql: built $root in ${elapsed}s ($size): $version"
