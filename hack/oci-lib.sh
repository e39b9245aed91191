# shellcheck shell=bash
# Writing OCI image archives by hand (no registry, no daemon, no image tool): an uncompressed
# layer tar of a root filesystem, the image config, the manifest and index.json, all addressed
# by sha256, in an OCI image layout packed as one tar that `ctr images import`, CRI-O's
# containers/image (`oci-archive:`), skopeo and podman read.
# Sourced by hack/build-images (test images) and hack/build-image (the nri-align image).

# oci_sha FILE prints the file's sha256 hex digest.
oci_sha() { sha256sum "$1" | cut -d' ' -f1; }

# oci_json_string TEXT prints TEXT as a JSON string (quotes, backslashes, control characters
# escaped).
oci_json_string() {
    local s="$1"
    s="${s//\\/\\\\}"; s="${s//\"/\\\"}"
    s="${s//$'\n'/\\n}"; s="${s//$'\t'/\\t}"; s="${s//$'\r'/\\r}"
    printf '"%s"' "$s"
}

# oci_json_array WORD... prints a JSON array of strings.
oci_json_array() {
    local out="" w
    for w in "$@"; do
        out+="${out:+,}$(oci_json_string "$w")"
    done
    printf '[%s]' "$out"
}

# oci_json_object KEY VALUE... prints a JSON object of string values, keys in the given order.
oci_json_object() {
    local out=""
    while [[ $# -ge 2 ]]; do
        out+="${out:+,}$(oci_json_string "$1"):$(oci_json_string "$2")"
        shift 2
    done
    printf '{%s}' "$out"
}

# oci_archive OUT_TAR REF ROOTFS CONFIG_JSON CREATED CREATED_BY [ANNOTATIONS_JSON]
# Packs ROOTFS as the single layer of image REF and writes the OCI layout tar to OUT_TAR.
#   CONFIG_JSON       the image config's "config" object (Env, Entrypoint, Cmd, User, Labels...)
#   CREATED           RFC 3339 time for the config and its history entry
#   CREATED_BY        the history entry's created_by
#   ANNOTATIONS_JSON  extra manifest annotations (a JSON object's members, without braces)
# Reproducible: files sorted, owned by 0:0, mtime 0, no atime/ctime, so the same ROOTFS and
# inputs give the same digests. Prints the manifest digest (sha256:...).
oci_archive() {
    local out="$1" ref="$2" rootfs="$3" config_json="$4" created="$5" created_by="$6"
    local annotations="${7:-}"
    local arch
    arch="$(dpkg --print-architecture)"   # Debian and OCI agree on amd64/arm64 names.
    local layout
    layout="$(mktemp -d "${TMPDIR:-/tmp}/nri-align-oci.XXXXXX")"
    local blobs="$layout/blobs/sha256"
    mkdir -p "$blobs"

    # Uncompressed layer: its digest is also its diff id.
    local layer="$layout/layer.tar"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
        --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
        -C "$rootfs" -cf "$layer" .
    local layer_digest layer_size
    layer_digest="$(oci_sha "$layer")"; layer_size="$(stat -c %s "$layer")"
    mv "$layer" "$blobs/$layer_digest"

    local config="$layout/config.json"
    printf '{"architecture":"%s","os":"linux","created":"%s","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"%s","created_by":%s}]}' \
        "$arch" "$created" "$config_json" "$layer_digest" "$created" "$(oci_json_string "$created_by")" >"$config"
    local config_digest config_size
    config_digest="$(oci_sha "$config")"; config_size="$(stat -c %s "$config")"
    mv "$config" "$blobs/$config_digest"

    local manifest="$layout/manifest.json"
    local manifest_annotations=""
    [[ -n "$annotations" ]] && manifest_annotations=",\"annotations\":{$annotations}"
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]%s}' \
        "$config_digest" "$config_size" "$layer_digest" "$layer_size" "$manifest_annotations" >"$manifest"
    local manifest_digest manifest_size
    manifest_digest="$(oci_sha "$manifest")"; manifest_size="$(stat -c %s "$manifest")"
    mv "$manifest" "$blobs/$manifest_digest"

    # io.containerd.image.name makes `ctr images import` keep the full reference as is;
    # org.opencontainers.image.ref.name is the tag other OCI tools read.
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
        "$manifest_digest" "$manifest_size" "$arch" "$ref" "${ref##*:}" >"$layout/index.json"
    printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

    mkdir -p "$(dirname "$out")"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$layout" \
        -cf "$out.tmp" oci-layout index.json blobs
    mv "$out.tmp" "$out"
    rm -rf "$layout"
    echo "sha256:$manifest_digest"
}
