# The l4-gpu pool's image: the project in /opt/tucano, installed by the Makefile's own install with
# the [gpu] extra (Unsloth, bitsandbytes) and PyPI's torch, whose wheel brings its CUDA libraries
# (the machine's driver comes from the host). From the project root:
#   docker build -f deployments/gpu.Dockerfile -t REGION-docker.pkg.dev/PROJECT/REPO/tucano:TAG .
FROM nvidia/cuda:12.8.1-base-ubuntu24.04

# make and a venv for the install; git for a pull step that clones; a C compiler because Triton
# (under Unsloth's kernels) builds its launchers when a run first uses them.
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 python3-venv python3-dev make git build-essential \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/tucano
# What the install and a run read; tests, docs and benchmarks stay out of the image.
COPY Makefile pyproject.toml README.md ./
COPY deployments/ deployments/
COPY configs/ configs/
COPY flows/ flows/
COPY tasks/ tasks/
COPY rewards/ rewards/
COPY data/ data/
RUN make install EXTRAS=gpu TORCH_SPEC=torch==2.13.0

# A worker's flow-run command is `python -m prefect.engine`: the project's environment first.
ENV PATH=/opt/tucano/.venv/bin:$PATH \
    TOKENIZERS_PARALLELISM=false
