# stallwatch's container image (issue #22): Debian bookworm, built from this repository.
#
#   docker build -t ghcr.io/stallwatch/stallwatch:$(git describe --always) .
#   docker push ghcr.io/stallwatch/stallwatch:...
#
# The build stage installs what the daemon and its package need (`scripts/install-deps.sh deb`:
# no test tools) and builds the .deb with `make deb`; the runtime stage installs that .deb
# into debian:bookworm-slim with apt, so the image holds the package's Depends and nothing else
# (no compiler, no test libraries). tests/packaging/chroot_test.sh proves the runtime stage
# without a container runtime: the same .deb installed by apt into an mmdebstrap'ed bookworm.
# The daemon needs the host's /proc, /sys and tracefs and some capabilities: see
# deploy/kubernetes/base/daemonset.yaml (or the Helm chart deploy/helm/stallwatch), or for a single
# host:
#   docker run --rm --pid=host --network=host --cap-add=BPF --cap-add=PERFMON \
#     --cap-add=SYS_ADMIN --cap-add=SYS_PTRACE --cap-add=DAC_READ_SEARCH --cap-add=SYS_RESOURCE \
#     --cap-add=SYSLOG --device /dev/kmsg --gpus all -e NVIDIA_DRIVER_CAPABILITIES=utility \
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     -v /sys/kernel/btf:/sys/kernel/btf:ro -v /sys/fs/cgroup:/sys/fs/cgroup:ro \
#     -v /sys/kernel/tracing:/sys/kernel/tracing -v /var/lib/stallwatch:/var/lib/stallwatch \
#     IMAGE run --listen 0.0.0.0:9464

FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends git ca-certificates \
    sudo && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The dependencies first, so that a source change does not reinstall them.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh deb && rm -rf /var/lib/apt/lists/*
COPY . .
# `make deb` configures, builds and packages: build/stallwatch_<version>_<arch>.deb.
RUN make deb && mkdir /out && cp build/stallwatch_*.deb /out/

FROM debian:bookworm-slim
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/ /tmp/deb/
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends /tmp/deb/*.deb \
    && rm -rf /var/lib/apt/lists/* /tmp/deb
VOLUME /var/lib/stallwatch
EXPOSE 9464
ENTRYPOINT ["/usr/bin/stallwatch"]
CMD ["run", "--listen", "0.0.0.0:9464", "--db", "/var/lib/stallwatch/stallwatch.db"]
