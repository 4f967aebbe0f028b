// Command mkimage builds meshlet's container image without a container
// engine and writes it as an OCI archive that `ctr images import`,
// `podman load` and `skopeo copy oci-archive:` accept (`make image`).
//
// The image is a multi-arch index (linux/amd64, linux/arm64), one manifest
// per architecture, each of three layers, least often changed first:
//
//  1. base: /etc/passwd and /etc/group naming root, /tmp, /run. No shell,
//     no package manager (distroless style).
//  2. Debian 12's iptables userspace for that architecture: the binaries the
//     --redirect-backend=iptables path execs (iptables-nft-{save,restore},
//     iptables-legacy-{save,restore}, the ip6tables ones, ipset), every
//     xtables extension (iptables dlopens one per match or target named in
//     a rule, and saving the node's rules at start-up reads kube-proxy's and
//     the CNI's rules, which may use any of them), the shared libraries all
//     of these need (found by walking their ELF DT_NEEDED entries, so the
//     same code serves both architectures) including glibc and its loader,
//     /etc/protocols, and each package's copyright file (GPL). The .deb
//     files are fetched with apt-get download through an apt state kept
//     under the cache directory, so the host's own apt configuration is
//     read but never changed (no dpkg --add-architecture), and extracted
//     with dpkg-deb; both are cached under
//     ~/.cache/meshlet/image/debian-<VERSION_ID>/ keyed by package versions.
//     Why this layer rather than a static image without it: the nftables
//     backend (the default) is in-process, but the iptables backend exists
//     for nodes whose other components use iptables, and an image that
//     cannot run it would make that flag useless in a cluster. It costs
//     a few MB per architecture. -iptables=false leaves it out (e.g. on a
//     host that is not Debian); meshlet --redirect-backend=iptables then
//     fails at start-up, when it looks the binaries up, not per pod.
//  3. meshlet: /usr/local/bin/meshlet, meshlet-cni and meshlet-gate, built
//     here with CGO_ENABLED=0 -trimpath -ldflags '-s -w -X
//     .../internal/version.Version=<version>'. The two small ones sit next
//     to meshlet because it installs them on the host from next to its own
//     executable (meshlet-cni in CNI mode, meshlet-gate with the DRA gate).
//
// The configuration runs /usr/local/bin/meshlet as User 0:0: meshlet enters
// pods' network namespaces and programs nftables, which needs root and the
// capabilities the DaemonSet grants (deploy/README.md, "Image").
//
// Reproducible: every timestamp (file mtimes, the config's created time,
// history) is SOURCE_DATE_EPOCH, else the commit time of HEAD; tar entries
// are sorted, owned by 0:0 with fixed modes; layers are gzipped once by Go's
// compress/gzip. Building twice from the same commit, Go toolchain and
// Debian package versions gives the same bytes.
//
// The archive's index.json names the image with both
// org.opencontainers.image.ref.name and io.containerd.image.name set to the
// full reference (localhost/meshlet/meshlet:<version>): containerd names an
// imported image after io.containerd.image.name; without it, a ref.name
// that is a full reference is used as is, and a bare tag gets a generated
// name.
package main

import "os"

func main() { os.Exit(run(os.Args[1:])) }
