# A static threadline binary on a distroless base, running as a non-root user.
#   docker build -t threadline --build-arg VERSION=v1.2.3 .
#   docker run -p 8080:8080 -v threadline-data:/data -e THREADLINE_TOKENS='<token>=<user>' threadline
# See docs/operations.md, "Container image".
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=
RUN make static VERSION="${VERSION}" && mkdir -p /out/data && cp bin/threadline-static /out/threadline

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/threadline /usr/local/bin/threadline
# The SQLite store lives in /data, owned by the image's non-root user.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
# Inside a container the server must listen beyond loopback, so it needs
# tokens (THREADLINE_TOKENS or THREADLINE_TOKENS_FILE): without them it
# refuses to start and says why.
ENV THREADLINE_ADDR=0.0.0.0:8080 \
    THREADLINE_STORE=sqlite:/data/threadline.db
EXPOSE 8080
VOLUME ["/data"]
ENTRYPOINT ["/usr/local/bin/threadline"]
CMD ["serve"]
