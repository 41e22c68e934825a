# syntax=docker/dockerfile:1
#
# minisgl-host images, built in stages (see README, "Scaling out"):
#
#   docker build -t minisgl:cpu .                          # CPU image (the default target)
#   docker build -t minisgl:cuda --target cuda .           # CUDA runtime image
#   docker build -t minisgl-sglang-router --target sglang-router .
#
# One builder compiles the host (release) and the default Wasm plugins; the
# runtime stages copy only the binary and the plugins. The CUDA backend is in
# every binary (cudarc loads the libraries at run time), so the CUDA image is
# the CPU image's contents on a base that carries the libraries it loads.

ARG RUST_VERSION=1.95
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04

# ---------------------------------------------------------------- build
FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
RUN rustup target add wasm32-wasip2
# The whole workspace: the host embeds kernels/ and wit/, and the manifest
# names the integration tests and example plugins (.dockerignore drops
# target/, models/ and .git/).
COPY . .
RUN cargo build --release --locked -p minisgl-host \
 && cargo build --locked --target wasm32-wasip2 --profile plugin \
      -p minisgl-fcfs-scheduler -p minisgl-lru-evictor -p minisgl-default-sampler \
 && mkdir -p /out/plugins \
 && cp target/release/minisgl-host /out/ \
 && cp target/wasm32-wasip2/plugin/*.wasm /out/plugins/

# ---------------------------------------------------------------- cuda
# cudarc dlopens, by bare name: libcuda.so.1 (the driver's: mounted into the
# container by the NVIDIA container toolkit, hence NVIDIA_DRIVER_CAPABILITIES),
# libnvrtc.so.13, libcublas.so.13 and libcublasLt.so.13 (CUDA 13 runtime
# libraries: installed explicitly so a slimmer base still has them).
FROM ${CUDA_IMAGE} AS cuda
RUN apt-get update \
 && apt-get install -y --no-install-recommends cuda-nvrtc-13-0 libcublas-13-0 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /nonexistent minisgl \
 && mkdir -p /var/cache/minisgl && chown 10001 /var/cache/minisgl
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64 \
    MINISGL_DEVICE=cuda
COPY --from=build /out/minisgl-host /usr/local/bin/minisgl-host
COPY --from=build /out/plugins /opt/minisgl/plugins
USER 10001
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/minisgl-host"]
CMD ["--host", "0.0.0.0", "--port", "8000", "--model", "/models/model", "--plugin-cache-dir", "/var/cache/minisgl"]

# ---------------------------------------------------------------- sglang-router
# SGLang's router (Rust, shipped as a Python wheel) for the Kubernetes example.
FROM python:3.11-slim-bookworm AS sglang-router
RUN pip install --no-cache-dir sglang-router==0.3.2 \
 && useradd --system --uid 10001 --home-dir /nonexistent router
USER 10001
EXPOSE 30000
ENTRYPOINT ["sglang-router", "launch"]

# ---------------------------------------------------------------- cpu (default)
FROM debian:bookworm-slim AS cpu
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /nonexistent minisgl \
 && mkdir -p /var/cache/minisgl && chown 10001 /var/cache/minisgl
COPY --from=build /out/minisgl-host /usr/local/bin/minisgl-host
COPY --from=build /out/plugins /opt/minisgl/plugins
USER 10001
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/minisgl-host"]
CMD ["--host", "0.0.0.0", "--port", "8000", "--model", "/models/model", "--plugin-cache-dir", "/var/cache/minisgl"]
