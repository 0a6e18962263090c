# Sourced by scripts/image-check.sh and scripts/node-check.sh: the operator's
# image assembled from what its binary links, with no base image and no
# container engine (nothing can be pulled here), written as a docker-archive
# that `docker load` and the kit node's containerd (`image-import`) both read.

image_lib_dir=$(dirname "${BASH_SOURCE[0]}")

# add_linked_libraries ROOTFS FILE...: the shared libraries each FILE links
# (as `ldd` resolves them here), at the same paths in ROOTFS.
add_linked_libraries() {
  local rootfs=$1; shift
  local lib
  for lib in $(ldd "$@" 2>/dev/null | grep -oE '/[^ :]+' | sort -u); do
    [[ -e "$lib" ]] || continue
    install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
  done
}

# add_user_files ROOTFS: the CA bundle, a passwd and group entry for the
# non-root user 65532, and a world-writable /tmp.
add_user_files() {
  local rootfs=$1
  if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  fi
  install -d -m 0755 "$rootfs/etc"
  echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > "$rootfs/etc/passwd"
  echo 'nonroot:x:65532:' > "$rootfs/etc/group"
  install -d -m 1777 "$rootfs/tmp"
}

# operator_image BINARY TAG OUT.tar: the operator's image as the Dockerfile
# ships it (the binary, the C runtime it links, the CA bundle, user 65532,
# MALLOC_ARENA_MAX=1, `shardring run`), written to OUT.tar.
operator_image() {
  local binary=$1 tag=$2 out=$3
  local rootfs
  rootfs=$(mktemp -d)
  install -D -m 0755 "$binary" "$rootfs/usr/local/bin/shardring"
  add_linked_libraries "$rootfs" "$binary"
  add_user_files "$rootfs"
  python3 "$image_lib_dir/image_archive.py" "$rootfs" "$out" --tag "$tag" \
    --entrypoint '["/usr/local/bin/shardring"]' --cmd '["run"]' \
    --user 65532:65532 --env MALLOC_ARENA_MAX=1 >/dev/null
  rm -rf "$rootfs"
}

# python_image SCRIPT TAG OUT.tar [PYTHON]: an image that runs SCRIPT (as
# /app/<name>) with this machine's CPython and its whole standard library, at
# the paths it has here (so the interpreter finds its prefix unchanged).
python_image() {
  local script=$1 tag=$2 out=$3 python=${4:-python3}
  local rootfs exe stdlib
  exe=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))')
  stdlib=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
  rootfs=$(mktemp -d)
  install -D -m 0755 "$exe" "$rootfs$exe"
  mkdir -p "$rootfs$stdlib"
  # The standard library without its tests, IDE and GUI toolkits.
  tar -C "$stdlib" --exclude=./test --exclude=./idlelib --exclude=./tkinter \
    --exclude=./turtledemo --exclude=./ensurepip --exclude=./site-packages \
    --exclude=./dist-packages -cf - . | tar -C "$rootfs$stdlib" -xf -
  add_linked_libraries "$rootfs" "$exe" "$stdlib"/lib-dynload/*.so
  add_user_files "$rootfs"
  install -D -m 0644 "$script" "$rootfs/app/$(basename "$script")"
  python3 "$image_lib_dir/image_archive.py" "$rootfs" "$out" --tag "$tag" \
    --entrypoint "[\"$exe\", \"-u\", \"/app/$(basename "$script")\"]" \
    --user 65532:65532 --workdir /app >/dev/null
  rm -rf "$rootfs"
}
