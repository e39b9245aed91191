# shellcheck shell=bash
# A real Kubernetes API server for custom resources (hack/apiserver-up, hack/apiserver-down):
# the upstream k8s.io/apiextensions-apiserver built from Debian sid's Go source packages in
# GOPATH mode, etcd from sid, a private CA, and a TokenReview/SubjectAccessReview webhook
# (hack/apiserver/authn-webhook) so bearer tokens work as in a cluster. Sourced after lib.sh,
# never run.
#
# Cache (.cache/apiserver/): debs/ (the downloaded closure), gopath/ (unpacked Go sources),
# go/ (golang-1.26 toolchain), gocache/ (Go's build cache), bin/ (the server and the webhook,
# each with a stamp naming exactly what it was built from). The binaries are rebuilt only when
# the stamp changes: another package version, another Go, another webhook source; and not even
# then where another checkout built them from the same (SHARED_BUILDS below). Package lists
# are looked at again at most once a day (NRI_ALIGN_OFFLINE=1: never).

APISERVER_SUITE=sid
APISERVER_GO=golang-1.26
APISERVER_CACHE="$CACHE_DIR/apiserver"
APISERVER_BIN="$APISERVER_CACHE/bin/apiextensions-apiserver"
WEBHOOK_BIN="$APISERVER_CACHE/bin/nri-align-authn-webhook"
WEBHOOK_SRC="$HACK_DIR/apiserver/authn-webhook"
ETCD_BIN="$CACHE_DIR/etcd-$APISERVER_SUITE/usr/bin/etcd"
GO_ROOT="$APISERVER_CACHE/go/usr/lib/go-1.26"
GO_PATH="$APISERVER_CACHE/gopath/usr/share/gocode"
# Built binaries are also kept beside every checkout of this machine, under the stamp of what
# they were built from: a fresh clone (each CI run) fetches the sources but takes the binary
# already built from the same ones instead of spending ~5 min of both CPUs on `go build`
# beside the Rust test build. NRI_ALIGN_SHARED_CACHE=off: never; another directory: there.
SHARED_BUILDS="${NRI_ALIGN_SHARED_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/nri-align}"
# Exit status of apiserver-up when the server cannot be had at all (no network and nothing
# cached): callers (tests) may skip on it, loudly.
APISERVER_UNAVAILABLE=75

# apiserver_vars NAME sets the paths of one instance under _output/apiserver/NAME/.
# shellcheck disable=SC2034 # the variables are for the scripts that source this file
apiserver_vars() {
    NAME="${1:-default}"
    [[ "$NAME" =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad instance name '$NAME'"
    AS_DIR="$OUTPUT_DIR/apiserver/$NAME"
    AS_PKI="$AS_DIR/pki"
    AS_ETCD_DATA="$AS_DIR/etcd"
    AS_ETCD_PID="$AS_DIR/etcd.pid"
    AS_ETCD_LOG="$AS_DIR/etcd.log"
    AS_PID="$AS_DIR/apiserver.pid"
    AS_LOG="$AS_DIR/apiserver.log"
    AS_ARGS="$AS_DIR/apiserver.args"
    WH_PID="$AS_DIR/webhook.pid"
    WH_LOG="$AS_DIR/webhook.log"
    AS_PORTS="$AS_DIR/ports"
    AS_ENV="$AS_DIR/env"
}

# pid_of PIDFILE NEEDLE prints the PID recorded in PIDFILE if that process is alive and its
# command line contains NEEDLE (a recycled PID would not).
pid_of() {
    local file="$1" needle="$2" pid
    [[ -f "$file" ]] || return 1
    pid="$(cat "$file")"
    [[ "$pid" =~ ^[0-9]+$ ]] && [[ -d "/proc/$pid" ]] || return 1
    grep -qF -- "$needle" < <(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    echo "$pid"
}

# alive PIDFILE: the process just started from PIDFILE still runs (not gone, not a zombie).
# Unlike pid_of it does not look for the command line: right after `start` the PID can still
# be the forked shell that has not exec'ed the program yet (seen under load: the program's
# log not even opened), which is starting, not dead.
alive() {
    local pid state
    pid="$(cat "$1" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" || return 1
    [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

# stop_pid PID WHAT: TERM, wait up to 10 s, then KILL.
stop_pid() {
    local pid="$1" what="$2"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do [[ -d "/proc/$pid" ]] || return 0; sleep 0.1; done
    log "$what ($pid) ignored TERM; killing"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 50); do [[ -d "/proc/$pid" ]] || return 0; sleep 0.1; done
}

# port_listening PORT: is anything listening on TCP PORT (IPv4 or IPv6)? Reads /proc, so no
# ss/netstat is needed.
port_listening() {
    local hex
    hex="$(printf ':%04X' "$1")"
    awk -v p="$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p {found = 1}
        END {exit !found}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# pick_ports: four consecutive free ports (etcd client, etcd peer, API server, webhook), from a
# start derived from the instance directory so parallel checkouts rarely probe the same ones.
pick_ports() {
    local start p ok i
    start=$((20000 + 0x$(printf '%s' "$AS_DIR" | sha256sum | cut -c1-4) % 20000))
    for ((p = start; p < start + 400; p += 4)); do
        ok=1
        for ((i = 0; i < 4; i++)); do
            if port_listening $((p + i)); then ok=0; break; fi
        done
        if [[ $ok == 1 ]]; then
            echo "$p $((p + 1)) $((p + 2)) $((p + 3))"
            return 0
        fi
    done
    die "no four free consecutive ports from $start"
}

# closure_packages: the golang-*-dev packages the server's sources need (the dependency closure
# of golang-k8s-apiextensions-apiserver-dev), one per line, sorted.
closure_packages() {
    apt_private apt-cache "$APISERVER_SUITE" depends --recurse --no-recommends --no-suggests \
        --no-conflicts --no-breaks --no-replaces --no-enhances \
        golang-k8s-apiextensions-apiserver-dev 2>/dev/null |
        awk '/^golang-[^ ]*-dev$/' | sort -u
}

# package_versions PKG...: "pkg=version" lines from the private lists.
package_versions() {
    apt_private apt-cache "$APISERVER_SUITE" show --no-all-versions "$@" 2>/dev/null |
        awk '/^Package:/ {p = $2} /^Version:/ {print p "=" $2}'
}

# fetch_tree DEST PKG=VER...: downloads the packages into debs/ (those not there yet, in one
# apt-get call) and unpacks them all into DEST (beside, then swapped in). Skips everything when
# DEST/.done lists exactly these versions.
fetch_tree() {
    local dest="$1"; shift
    local want debdir="$APISERVER_CACHE/debs" missing=() pv pkg ver deb
    want="$(printf '%s\n' "$@")"
    if [[ -f "$dest/.done" ]] && [[ "$(cat "$dest/.done")" == "$want" ]]; then
        return 0
    fi
    mkdir -p "$debdir"
    for pv in "$@"; do
        pkg="${pv%%=*}" ver="${pv#*=}"
        # apt names files pkg_VERSION_arch.deb with ':' in the version escaped as %3a.
        if ! compgen -G "$debdir/${pkg}_${ver//:/%3a}_*.deb" >/dev/null; then
            missing+=("$pv")
        fi
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        log "downloading ${#missing[@]} packages from $APISERVER_SUITE into $debdir"
        (cd "$debdir" && apt_private apt-get "$APISERVER_SUITE" download "${missing[@]}" >/dev/null)
    fi
    log "unpacking $# packages into $dest"
    rm -rf "$dest.new" "$dest.old"
    mkdir -p "$dest.new"
    for pv in "$@"; do
        pkg="${pv%%=*}" ver="${pv#*=}"
        deb="$(compgen -G "$debdir/${pkg}_${ver//:/%3a}_*.deb" | head -n 1)"
        [[ -n "$deb" ]] || die "download of $pv produced no .deb"
        dpkg -x "$deb" "$dest.new"
    done
    printf '%s\n' "$want" >"$dest.new/.done"
    [[ -e "$dest" ]] && mv "$dest" "$dest.old"
    mv "$dest.new" "$dest"
    rm -rf "$dest.old"
    # Other versions of these packages (superseded downloads).
    for pv in "$@"; do
        pkg="${pv%%=*}" ver="${pv#*=}"
        for deb in "$debdir/${pkg}_"*.deb; do
            [[ -e "$deb" ]] || continue
            [[ "$(basename "$deb")" == "${pkg}_${ver//:/%3a}_"* ]] || rm -f "$deb"
        done
    done
}

# apiserver_fill_cache: packages, toolchain, etcd and both binaries, as cached as possible.
# Exits with APISERVER_UNAVAILABLE when nothing is cached and the mirror cannot be reached.
apiserver_fill_cache() {
    mkdir -p "$APISERVER_CACHE"
    local stamp="$APISERVER_CACHE/.checked"
    local fresh=0
    if [[ -x "$APISERVER_BIN" && -x "$WEBHOOK_BIN" && -x "$ETCD_BIN" && -f "$stamp" ]]; then
        if [[ "${NRI_ALIGN_OFFLINE:-0}" == 1 ]] || [[ -n "$(find "$stamp" -mmin -1440)" ]]; then
            fresh=1
        fi
    fi
    if [[ $fresh == 1 ]]; then
        build_webhook # its source is in the checkout: rebuilt when it changes
        return 0
    fi
    if ! apt_refresh "$APISERVER_SUITE" 2>/dev/null; then
        log "apt update ($APISERVER_SUITE) failed"
    fi
    local closure versions go_versions
    closure="$(closure_packages || true)"
    if [[ -z "$closure" ]]; then
        if [[ -x "$APISERVER_BIN" && -x "$WEBHOOK_BIN" && -x "$ETCD_BIN" ]]; then
            log "package lists unavailable: using the cached API server"
            return 0
        fi
        log "error: cannot build the API server: the $APISERVER_SUITE package lists cannot be read (no network?) and nothing is cached in $APISERVER_CACHE"
        exit "$APISERVER_UNAVAILABLE"
    fi
    # shellcheck disable=SC2086 # one package per word
    versions="$(package_versions $closure)"
    go_versions="$(package_versions "$APISERVER_GO-go" "$APISERVER_GO-src")"
    [[ $(wc -l <<<"$versions") -eq $(wc -l <<<"$closure") ]] ||
        die "some of the $(wc -l <<<"$closure") packages have no version in $APISERVER_SUITE"
    [[ $(wc -l <<<"$go_versions") -eq 2 ]] || die "$APISERVER_GO-go/-src not found in $APISERVER_SUITE"
    mapfile -t vs <<<"$versions"
    mapfile -t gs <<<"$go_versions"
    fetch_tree "$APISERVER_CACHE/gopath" "${vs[@]}"
    fetch_tree "$APISERVER_CACHE/go" "${gs[@]}"
    fetch_deb "$APISERVER_SUITE" etcd-server "$CACHE_DIR/etcd-$APISERVER_SUITE"
    build_apiserver
    build_webhook
    touch "$stamp"
}

# shared_build BIN STAMP: takes BIN from the shared builds when one built from STAMP is there
# (then BIN's stamp is STAMP); status 1 when none is.
shared_build() {
    local bin="$1" want="$2" kept
    [[ $SHARED_BUILDS != off ]] || return 1
    kept="$SHARED_BUILDS/$(basename "$bin")-$want"
    [[ -x $kept ]] || return 1
    mkdir -p "$(dirname "$bin")"
    { cp "$kept" "$bin.new" && mv "$bin.new" "$bin" && echo "$want" >"$bin.stamp"; } || return 1
    log "took $(basename "$bin") built from the same sources from $kept"
}

# share_build BIN STAMP: keeps BIN (built from STAMP) for the other checkouts; a failure to keep
# it only costs them a build.
share_build() {
    local bin="$1" want="$2" kept
    [[ $SHARED_BUILDS != off ]] || return 0
    kept="$SHARED_BUILDS/$(basename "$bin")-$want"
    [[ -x $kept ]] && return 0
    if ! { mkdir -p "$SHARED_BUILDS" && cp "$bin" "$kept.new.$$" && mv "$kept.new.$$" "$kept"; } 2>/dev/null; then
        rm -f "$kept.new.$$"
        log "could not keep $(basename "$bin") in $SHARED_BUILDS"
    fi
    return 0
}

go_env() {
    env GOROOT="$GO_ROOT" GOPATH="$GO_PATH" GO111MODULE=off GOPROXY=off GOFLAGS= \
        GOTOOLCHAIN=local GOCACHE="$APISERVER_CACHE/gocache" CGO_ENABLED=0 "$@"
}

# build_apiserver: `go build k8s.io/apiextensions-apiserver` (the standalone server's main) when
# the sources or the toolchain changed since the binary was built.
build_apiserver() {
    local want
    want="$(cat "$APISERVER_CACHE/gopath/.done" "$APISERVER_CACHE/go/.done" | sha256sum | cut -c1-16)"
    if [[ -x "$APISERVER_BIN" ]] && [[ "$(cat "$APISERVER_BIN.stamp" 2>/dev/null)" == "$want" ]]; then
        share_build "$APISERVER_BIN" "$want"
        return 0
    fi
    shared_build "$APISERVER_BIN" "$want" && return 0
    mkdir -p "$(dirname "$APISERVER_BIN")"
    log "building k8s.io/apiextensions-apiserver (GOPATH mode; ~5 min cold on 2 cores)"
    local t0=$SECONDS
    go_env "$GO_ROOT/bin/go" build -trimpath -ldflags='-s -w' -o "$APISERVER_BIN.new" \
        k8s.io/apiextensions-apiserver
    mv "$APISERVER_BIN.new" "$APISERVER_BIN"
    echo "$want" >"$APISERVER_BIN.stamp"
    log "built the API server in $((SECONDS - t0)) s"
    share_build "$APISERVER_BIN" "$want"
}

# build_webhook: the TokenReview/SubjectAccessReview webhook, from hack/apiserver/authn-webhook
# against the same Go sources.
build_webhook() {
    local want
    want="$(cat "$APISERVER_CACHE/gopath/.done" "$APISERVER_CACHE/go/.done" "$WEBHOOK_SRC"/*.go |
        sha256sum | cut -c1-16)"
    if [[ -x "$WEBHOOK_BIN" ]] && [[ "$(cat "$WEBHOOK_BIN.stamp" 2>/dev/null)" == "$want" ]]; then
        share_build "$WEBHOOK_BIN" "$want"
        return 0
    fi
    shared_build "$WEBHOOK_BIN" "$want" && return 0
    mkdir -p "$(dirname "$WEBHOOK_BIN")"
    log "building the authentication webhook"
    (cd "$WEBHOOK_SRC" && go_env "$GO_ROOT/bin/go" build -trimpath -o "$WEBHOOK_BIN.new" .)
    mv "$WEBHOOK_BIN.new" "$WEBHOOK_BIN"
    echo "$want" >"$WEBHOOK_BIN.stamp"
    share_build "$WEBHOOK_BIN" "$want"
}

# api_request METHOD PATH [BODYFILE CONTENT-TYPE]: one HTTPS request to the instance's server
# with the admin client certificate, through openssl (no curl needed). Prints the response
# (status line, headers, body).
api_request() {
    local method="$1" path="$2" body="${3:-}" ctype="${4:-application/json}" port
    port="$(awk '{print $3}' "$AS_PORTS")"
    {
        printf '%s %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nAccept: application/json\r\n' \
            "$method" "$path" "$port"
        if [[ -n "$body" ]]; then
            printf 'Content-Type: %s\r\nContent-Length: %s\r\n' "$ctype" "$(stat -c %s "$body")"
        fi
        printf '\r\n'
        if [[ -n "$body" ]]; then cat "$body"; fi
    } | timeout 10 openssl s_client -quiet -verify_return_error -verify_quiet \
        -connect "127.0.0.1:$port" -servername localhost \
        -CAfile "$AS_PKI/ca.crt" -cert "$AS_PKI/admin.crt" -key "$AS_PKI/admin.key" 2>/dev/null
}

# api_status RESPONSE: the HTTP status code of a response from api_request.
api_status() {
    awk 'NR == 1 {print $2; exit}' <<<"$1"
}
