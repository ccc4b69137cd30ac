# Sourced by the scripts that compare the working tree with an older
# commit: puts a detached worktree of that commit at a fixed place.

# checkout_old TREE REV: TREE becomes a detached worktree at REV (made on
# first use, moved afterwards).
checkout_old() {
    local tree=$1 commit
    commit=$(git rev-parse --verify "$2^{commit}")
    if [ ! -d "$tree" ]; then
        git worktree add --detach "$tree" "$commit" >/dev/null
    else
        git -C "$tree" checkout --quiet --detach "$commit"
    fi
}

# release_pair REV: release builds of `roce` at REV (in a worktree under
# ${COMPARE_DIR:-/tmp/roce-compare}) and of the working tree; sets `old`
# and `new` to their paths.
release_pair() {
    local dir=${COMPARE_DIR:-/tmp/roce-compare}
    checkout_old "$dir/tree" "$1"
    echo "building $1 ($(git rev-parse --verify "$1^{commit}")) and the working tree (release)" >&2
    CARGO_TARGET_DIR=$dir/target cargo build --quiet --release -p roce-cli --manifest-path "$dir/tree/Cargo.toml"
    cargo build --quiet --release -p roce-cli
    old=$dir/target/release/roce
    new=target/release/roce
}
