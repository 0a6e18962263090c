#!/usr/bin/env python3
"""Writes a one-layer container image as a docker-archive tarball (the format
`docker save` writes and `docker load` / `ctr images import` read) from a root
filesystem directory, with no container engine:

    image_archive.py ROOTFS OUT.tar --tag REF [--tag REF ...] \
        --entrypoint '["/usr/local/bin/shardring"]' [--cmd '["run"]'] \
        [--user 65532:65532] [--env K=V ...] [--workdir DIR]

The layer keeps the rootfs's modes and symlinks, with every file owned by
root (uid/gid 0) and mtime 0, so the same rootfs gives the same image id.
"""

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def layer_bytes(rootfs: str) -> bytes:
    """The rootfs as an uncompressed tar, entries sorted, owners and times
    zeroed (a reproducible layer)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory, dirs, files in os.walk(rootfs):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(directory, name)
                arcname = os.path.relpath(path, rootfs)
                info = tar.gettarinfo(path, arcname)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                if info.isfile():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buffer.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rootfs")
    parser.add_argument("out")
    parser.add_argument("--tag", action="append", required=True, help="image reference, e.g. ghcr.io/x/y:1")
    parser.add_argument("--entrypoint", required=True, help="JSON array")
    parser.add_argument("--cmd", default="[]", help="JSON array")
    parser.add_argument("--user", default="")
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    if not os.path.isdir(args.rootfs):
        print(f"image_archive.py: {args.rootfs} is not a directory", file=sys.stderr)
        return 2

    layer = layer_bytes(args.rootfs)
    layer_digest = hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": args.user,
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"] + args.env,
            "Entrypoint": json.loads(args.entrypoint),
            "Cmd": json.loads(args.cmd),
            "WorkingDir": args.workdir,
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [{"created_by": "scripts/lib/image_archive.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{
        "Config": config_name,
        "RepoTags": args.tag,
        "Layers": [f"{layer_digest}/layer.tar"],
    }]

    def add(tar, name, data):
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(args.out, mode="w") as tar:
        add(tar, f"{layer_digest}/layer.tar", layer)
        add(tar, config_name, config_bytes)
        add(tar, "manifest.json", json.dumps(manifest).encode())
    print(f"sha256:{hashlib.sha256(config_bytes).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
