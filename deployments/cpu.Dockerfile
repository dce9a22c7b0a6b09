# A CPU image for process workers on any machine (a `remote` pool worker, or `tucano` itself):
# the project in /opt/tucano, installed by the Makefile's own install with PyTorch's CPU build.
# From the project root:
#   docker build -f deployments/cpu.Dockerfile -t tucano-cpu:TAG .
FROM python:3.11-slim

# make for the install; git for the remote pool's pull step, which clones the code.
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make git \
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
# PyTorch's CPU index beside PyPI: its torch==2.13.0+cpu is chosen over PyPI's CUDA build (2 GB
# of CUDA libraries a CPU never loads).
RUN PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu \
    make install EXTRAS= TORCH_SPEC=torch==2.13.0

ENV PATH=/opt/tucano/.venv/bin:$PATH \
    TOKENIZERS_PARALLELISM=false
CMD ["tucano", "--help"]
