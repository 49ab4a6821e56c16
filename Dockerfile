# Build: the Swift 6 toolchain on Debian bookworm, plus the C libraries'
# development headers from Debian.
FROM swift:6.3-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libpq-dev libmicrohttpd-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
COPY Plugins ./Plugins
COPY Migrations ./Migrations
COPY Tests ./Tests
RUN swift build -c release --product wallet --static-swift-stdlib -Xswiftc -warnings-as-errors \
 && install -D "$(swift build -c release --show-bin-path)/wallet" /out/wallet

# Run: a slim Debian with the three C libraries and what the statically
# linked Swift runtime still loads (libcurl for outbound HTTPS to Apple,
# libxml2, tzdata). Migrations, the OpenAPI document and Apple's root
# certificate are compiled into the binary.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libpq5 libmicrohttpd12 libssl3 ca-certificates libcurl4 libxml2 tzdata \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin wallet
COPY --from=build /out/wallet /usr/local/bin/wallet
ENV WALLET_LISTEN=0.0.0.0:8080
USER wallet
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/wallet"]
CMD ["serve"]
