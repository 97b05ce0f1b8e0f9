# A Dockerfile with known problems: the linter must report them (scripts/dockerfile-lint.sh).
FROM debian:bookworm-slim as base
CMD echo hello
ENV GREETING hello
