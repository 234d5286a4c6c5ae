#!/usr/bin/env bash
# Builds hoard's two images as OCI archives under OUT (make images):
#
#   hoard.tar         the static hoard binary, CA bundle, /etc/passwd and
#                     /tmp, running as uid 65532: the controller and the
#                     sidecar cachelet
#   pause.tar         the pod sandbox's process, for clusters that cannot
#                     pull the upstream pause image (the single-node cluster)
#   hoard-worker.tar  Debian's python3 with boto3 and the hoard_worker
#                     package, plus the same hoard binary: the node agent,
#                     which runs the functions' workers
#
# Reproducible: the Debian packages are the versions in debian.lock, the
# wheels those in worker-requirements.txt, the binary is built with
# -trimpath and no build id, and every file is dated SOURCE_DATE_EPOCH
# (default: the last commit's date), so two builds of one commit give the
# same digests (build.sh prints them). No registry and no daemon: apt-get
# download, pip download and go-containerregistry writing files.
#
#   deploy/images/build.sh [OUT]      (default out/images)
#   deploy/images/build.sh --lock     rewrite debian.lock from this machine's apt
set -euo pipefail
umask 022

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
PIP=${PIP:-$root/.venv/bin/pip}
IMAGE_REPO=${IMAGE_REPO:-docker.io/hoard-io}
IMAGE_TAG=${IMAGE_TAG:-dev}

if [[ ${1:-} == --lock ]]; then
	exclude=" dpkg install-info perl perl-base perl-modules-5.36 libperl5.36 tar libgdbm-compat4 libdb5.3 mailcap mime-support "
	{
		sed -n '/^#/p' "$here/debian.lock"
		for p in $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
			--no-breaks --no-replaces --no-enhances python3 coreutils dash | grep '^\w' | sort -u) ca-certificates; do
			[[ $exclude == *" $p "* ]] && continue
			echo "$p=$(apt-cache policy "$p" | awk '/Candidate:/{print $2}')"
		done
	} >"$here/debian.lock.new"
	mv "$here/debian.lock.new" "$here/debian.lock"
	exit 0
fi

out=$(mkdir -p "${1:-$root/out/images}" && cd "${1:-$root/out/images}" && pwd)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
stage=$out/stage
cache=$out/cache
rm -rf "$stage"
mkdir -p "$stage" "$cache/debs" "$cache/wheels"

# The Debian packages, downloaded once per version into the cache.
debs=()
while IFS= read -r line; do
	[[ -z $line || $line == \#* ]] && continue
	name=${line%%=*} ver=${line#*=}
	dir=$cache/debs/$name/${ver//[:~+]/_}
	if ! compgen -G "$dir/*.deb" >/dev/null; then
		mkdir -p "$dir"
		(cd "$dir" && apt-get download -qq -o APT::Sandbox::User=root "$name=$ver") || {
			echo "build.sh: cannot download $name=$ver (run apt-get update, or deploy/images/build.sh --lock after a Debian point release)" >&2
			exit 1
		}
	fi
	debs+=("$(compgen -G "$dir/*.deb")")
done <"$here/debian.lock"

# The bundle of trusted CAs, from ca-certificates' Mozilla certificates in
# a fixed order (the package's postinst, which makes it on a Debian
# system, does not run here).
cadir=$stage/ca
mkdir -p "$cadir"
dpkg-deb -x "$(printf '%s\n' "${debs[@]}" | grep /ca-certificates/)" "$cadir"
bundle=$stage/ca-certificates.crt
find "$cadir/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort | xargs cat >"$bundle"

# hoard, static.
mkdir -p "$stage/hoard/usr/local/bin"
(cd "$root" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" build -trimpath \
	-ldflags "-s -w -buildid= -X main.version=$IMAGE_TAG" -o "$stage/hoard/usr/local/bin/hoard" ./cmd/hoard)

# The static image's base: users, CA bundle, /tmp.
base=$stage/base
mkdir -p "$base/etc/ssl/certs" "$base/tmp" "$base/var/lib/hoard" "$base/run/hoard"
chmod 1777 "$base/tmp"
cp "$bundle" "$base/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nhoard:x:65532:65532:hoard:/var/lib/hoard:/sbin/nologin\n' >"$base/etc/passwd"
printf 'root:x:0:\nhoard:x:65532:\n' >"$base/etc/group"

# The worker image's root file system: the Debian packages, unpacked
# (no maintainer scripts run; python3 needs none), less documentation.
rootfs=$stage/rootfs
mkdir -p "$rootfs"
for d in "${debs[@]}"; do dpkg-deb -x "$d" "$rootfs"; done
rm -rf "$rootfs"/usr/share/{doc,man,info,lintian,locale,bug}
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/var/lib/hoard" "$rootfs/run/hoard"
chmod 1777 "$rootfs/tmp"
cp "$bundle" "$rootfs/etc/ssl/certs/ca-certificates.crt"
cat "$base/etc/passwd" >"$rootfs/etc/passwd"
cat "$base/etc/group" >"$rootfs/etc/group"

# The worker's Python: boto3 and its dependencies into dist-packages
# (under /usr, which the jail binds), hoard_worker beside them.
worker=$stage/worker
site=$worker/usr/lib/python3/dist-packages
mkdir -p "$site" "$worker/usr/lib/hoard/python"
"$PIP" download -q --disable-pip-version-check --only-binary=:all: --no-deps \
	--python-version 3.11 -d "$cache/wheels" -r "$here/worker-requirements.txt"
"$PIP" install -q --disable-pip-version-check --no-index --find-links "$cache/wheels" \
	--no-deps --no-compile --target "$site" -r "$here/worker-requirements.txt"
rm -rf "$site/bin"
find "$site" -name INSTALLER -path '*.dist-info/*' -delete
find "$site" -name REQUESTED -path '*.dist-info/*' -delete
cp -r "$root/python/hoard_worker" "$worker/usr/lib/hoard/python/"
find "$worker" -name __pycache__ -prune -exec rm -rf {} +

(cd "$here" && "$GO" build -o "$stage/images" .)
mkdir -p "$stage/pause"
(cd "$here" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w -buildid=" -o "$stage/pause/pause" ./pause)
"$stage/images" --out "$out/pause.tar" --name "$IMAGE_REPO/pause:$IMAGE_TAG" \
	--layer "$stage/pause" --entrypoint /pause --user 65535:65535
"$stage/images" --out "$out/hoard.tar" --name "$IMAGE_REPO/hoard:$IMAGE_TAG" \
	--layer "$base" --layer "$stage/hoard" \
	--owner /var/lib/hoard=65532:65532 --owner /run/hoard=65532:65532 \
	--entrypoint /usr/local/bin/hoard --user 65532:65532 --workdir /var/lib/hoard \
	--env PATH=/usr/local/bin \
	--label org.opencontainers.image.source=https://github.com/hoard-io/hoard
"$stage/images" --out "$out/hoard-worker.tar" --name "$IMAGE_REPO/hoard-worker:$IMAGE_TAG" \
	--layer "$rootfs" --layer "$worker" --layer "$stage/hoard" \
	--owner /var/lib/hoard=65532:65532 --owner /run/hoard=65532:65532 \
	--entrypoint /usr/local/bin/hoard --workdir /var/lib/hoard \
	--env PATH=/usr/local/bin:/usr/bin:/bin \
	--env HOARD_PYTHON=/usr/bin/python3 --env HOARD_WORKER_PATH=/usr/lib/hoard/python \
	--label org.opencontainers.image.source=https://github.com/hoard-io/hoard
rm -rf "$stage"
