# pdserve container image: one binary, `pdserve <command>` (router, prefill, decode, kvstore, ...).
#   docker build -t pdserve:latest .
#   docker run --rm pdserve:latest help
# Kubernetes manifests: deploy/k8s (docs/deploy.md). This image is the CPU build; a GPU image
# builds the same way from a CUDA base with -DPDSERVE_CUDA=ON.

# ---- build: the toolchain and -dev packages from scripts/setup.sh, the release preset ----
FROM debian:12 AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# setup.sh alone first, so that the package layer is cached across source changes.
COPY scripts/setup.sh scripts/setup.sh
RUN bash scripts/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# The release preset (CMakePresets.json: Ninja, Release, build/release), without tests and
# benchmarks, which the image does not ship. The engine's kernels need AVX2/FMA/F16C at run time
# (checked at startup): the code is compiled for x86-64-v3 (cmake/pdserve_helpers.cmake).
RUN cmake --preset release -DPDSERVE_BUILD_TESTS=OFF -DPDSERVE_BUILD_BENCHMARKS=OFF \
      -DPDSERVE_CUDA=OFF \
 && cmake --build --preset release --target pdserve \
 && install -D -m 0755 build/release/tools/pdserve /out/usr/local/bin/pdserve \
 && install -D -m 0644 "$(find build/release -name 'libpdserve_spm_shim.so' -print -quit)" \
      /out/usr/local/bin/libpdserve_spm_shim.so \
 && strip --strip-unneeded /out/usr/local/bin/pdserve

# ---- runtime: the shared libraries pdserve links, nothing else ----
FROM debian:12-slim
ENV DEBIAN_FRONTEND=noninteractive
# libsentencepiece0 is loaded by libpdserve_spm_shim.so (kept beside the binary, where pdserve
# looks for it); the rest are pdserve's own link dependencies (gRPC, protobuf, Abseil, spdlog, fmt,
# UCX, prometheus-cpp core).
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libspdlog1.10 libfmt9 \
      libucx0 libprometheus-cpp-core1.0 libsentencepiece0 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /
# The UID the Kubernetes manifests run as (runAsUser: 10001): UCX's SysV shared-memory segments are
# mode 0600, so every pdserve process of a node must share it.
RUN groupadd --system --gid 10001 pdserve \
 && useradd --system --uid 10001 --gid pdserve --no-create-home --shell /usr/sbin/nologin pdserve
USER 10001:10001
# gRPC (--listen) and HTTP (--http-listen: /metrics; on the router also the OpenAI API), as the
# manifests use them; the kvstore listens on 50060.
EXPOSE 50051 50060 8080
ENTRYPOINT ["/usr/local/bin/pdserve"]
CMD ["help"]
