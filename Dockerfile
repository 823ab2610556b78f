FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md ./
COPY core core
COPY tools tools
COPY workers workers
COPY memory memory
COPY agents agents
COPY services services
RUN pip install .
ENV OPSGRAPH_VAR_DIR=/data
VOLUME /data
EXPOSE 8000
CMD ["opsgraph", "api"]
