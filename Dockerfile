# halo container images (docs/deploy.md).
#
#   scripts/build-image.sh                       # target runtime: `halo serve` on port 8000
#   scripts/build-image.sh --target sagemaker    # SageMaker's contract: `docker run IMAGE serve`, port 8080
#
# Stages: build (compiles halo from this tree with Debian's packages), base
# (only the shared libraries halo needs at run time, a non-root user, the
# binary, plugins and the embedded model), then the two targets. runtime is
# the last stage, so a build without --target gives it.
#
# BASE must be Debian 12: the build installs its packages and the runtime
# stage names its library package versions (libgrpc29, libfmt9, ...).
# Where Docker Hub is unreachable, import a Debian rootfs and pass it:
# --build-arg BASE=localhost/debian:12 (docs/deploy.md).
ARG BASE=debian:12

FROM ${BASE} AS build
WORKDIR /src
ENV DEBIAN_FRONTEND=noninteractive
# The dependency script alone first: editing the sources keeps this layer.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
# Only what the build reads (tests/deploy checks this list against the CMake
# files): editing docs or tests keeps the compile layer cached.
COPY CMakeLists.txt ./
COPY cmake cmake
COPY core core
COPY plugins plugins
COPY tools tools
COPY python python
COPY proto proto
COPY ui ui
COPY configs configs
COPY models models
# halo_plugin_cuda needs nvcc in the build stage and the CUDA runtime
# libraries in the final one; neither is in this Debian base.
ARG TARGETS="halo halo_plugin_cpu halo_plugin_rbln"
# Parallel compile jobs (empty: ninja's default, cores + 2).
ARG JOBS=""
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DHALO_BUILD_TESTS=OFF -DHALO_BUILD_BENCHMARKS=OFF \
 && cmake --build build --target ${TARGETS} ${JOBS:+-j ${JOBS}}
# The install tree's layout, which halo resolves from its own path:
# bin/halo, lib/halo/plugins/libhalo_plugin_<name>.so (core/device/plugin_search.cpp),
# share/halo/models/pkgchat-5m (the default model, tools/halo/engine_options.cpp),
# share/halo/configs/rbln-atom.yaml (the rbln device profile, plugins/rbln).
RUN mkdir -p /out/bin /out/lib/halo/plugins /out/share/halo/models /out/share/halo/configs \
 && install -m 0755 -s build/bin/halo /out/bin/halo \
 && for p in build/lib/halo/plugins/libhalo_plugin_*.so; do install -m 0644 "$p" /out/lib/halo/plugins/; done \
 && strip --strip-unneeded /out/lib/halo/plugins/*.so \
 && cp -r models/pkgchat-5m /out/share/halo/models/ \
 && cp configs/rbln-atom.yaml /out/share/halo/configs/

FROM ${BASE} AS base
# Runtime libraries only: the NEEDED entries of bin/halo and the plugins
# (`readelf -d`), mapped to Debian 12 packages with `dpkg -S`; apt pulls in
# their own dependencies. ca-certificates: Hugging Face downloads over HTTPS.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates \
      libstdc++6 libgcc-s1 libgomp1 \
      libboost-filesystem1.74.0 libcurl4 libssl3 \
      libfmt9 libspdlog1.10 libyaml-cpp0.7 libpcre2-8-0 libutf8proc2 \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 \
      libzmq5 \
      libdnnl2 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
COPY --from=build /out/ /usr/local/
# Fail the build, not the first start, if a library is missing or a plugin
# does not load.
RUN ! ldd /usr/local/bin/halo /usr/local/lib/halo/plugins/*.so | grep 'not found' \
 && halo --version && halo devices
# A fixed numeric uid, so Kubernetes' runAsNonRoot can check it.
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/halo --shell /usr/sbin/nologin halo
USER 10001:10001
WORKDIR /home/halo
# Hugging Face ids download here; mount a volume to keep them across restarts.
ENV HF_HOME=/home/halo/.cache/huggingface

FROM base AS sagemaker
# SageMaker starts the container as `docker run IMAGE serve`: `serve` must be
# a command on PATH, and the server must answer /ping and /invocations on 8080.
COPY --chmod=0755 deploy/sagemaker/serve /usr/local/bin/serve
EXPOSE 8080
ENTRYPOINT []
CMD ["serve"]

FROM base AS runtime
EXPOSE 8000
# No HEALTHCHECK: Kubernetes probes /health (readiness) and /v2/health/live.
ENTRYPOINT ["halo"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
