#!/usr/bin/env bash
# Every OSU OpenSHMEM benchmark across two network-namespace "hosts" on a
# bridge, with this checkout's libshmem and one ROCE provider: the numbers
# of shmem-bench/README.md's issue-17 section ("Session of 2026-12-08").
#
#   scripts/osu-across-hosts.sh PROVIDER [BENCH[:heap|:global] ...]
#
# PROVIDER: tcp (libfabric tcp;ofi_rxm), sockets (libfabric sockets), sw
# (the software provider) or auto. Needs root (ip netns), a release build
# (cargo build --release -p shmem-capi -p shmem-launch), a C compiler and
# the OSU 7.4 sources (OSU_DIR, default ../shared/third-party/
# osu-micro-benchmarks-7.4; they stay out of this repository). Two-PE
# benchmarks run 1 + 1 PEs, the others 2 + 2; each gets LIMIT seconds
# (default 120). Prints one line per run and its last row. The namespaces
# stay for the next run; remove them with
#   ip netns del osu-h0; ip netns del osu-h1; ip link del osu-br
set -euo pipefail
cd "$(dirname "$0")/.."
provider=${1:?usage: $0 tcp|sockets|sw|auto [BENCH[:heap|:global] ...]}
shift
case $provider in
tcp) export SHMEM_ROCE_PROVIDER=ofi FI_PROVIDER=tcp ;;
sockets) export SHMEM_ROCE_PROVIDER=ofi FI_PROVIDER=sockets FI_SOCKETS_PE_WAITTIME=0 ;;
sw) export SHMEM_ROCE_PROVIDER=sw ;;
auto) export SHMEM_ROCE_PROVIDER=auto ;;
*) echo "unknown provider $provider" >&2; exit 2 ;;
esac
osu=${OSU_DIR:-../shared/third-party/osu-micro-benchmarks-7.4}
limit=${LIMIT:-120}
lib=$PWD/target/release
out=${OSU_BUILD:-target/osu-across-hosts}
[ -x "$lib/shmemrun" ] && [ -e "$lib/libshmem.so" ] || {
    echo "build first: cargo build --release -p shmem-capi -p shmem-launch" >&2
    exit 2
}
benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then
    for b in put get put_nb get_nb put_overlap atomics put_mr get_mr_nb put_mr_nb; do
        benches+=("$b:heap" "$b:global")
    done
    benches+=(barrier broadcast collect fcollect reduce)
fi

# Two hosts: namespaces osu-h0/osu-h1, 10.178.8.1/2 on bridge osu-br.
net=10.178.8
ip link show osu-br >/dev/null 2>&1 || {
    ip link add osu-br type bridge
    ip addr add $net.254/24 dev osu-br
    ip link set osu-br up
}
for k in 0 1; do
    ip netns list | grep -qw "osu-h$k" && continue
    ip netns add "osu-h$k"
    ip link add "osu-a$k" type veth peer name "osu-b$k"
    ip link set "osu-b$k" netns "osu-h$k"
    ip link set "osu-a$k" master osu-br
    ip link set "osu-a$k" up
    ip netns exec "osu-h$k" ip addr add "$net.$((k + 1))/24" dev "osu-b$k"
    ip netns exec "osu-h$k" ip link set "osu-b$k" up
    ip netns exec "osu-h$k" ip link set lo up
done

mkdir -p "$out"
util=$osu/c/util
port=$((30000 + $$ % 20000))
for spec in "${benches[@]}"; do
    b=${spec%%:*}
    arg=${spec#"$b"}
    arg=${arg#:}
    exe=$out/$b
    if [ ! -x "$exe" ]; then
        SHMEM_LIBDIR=$lib shmem-capi/bin/oshcc -O2 -std=gnu99 -I"$util" \
            "$osu/c/openshmem/osu_oshm_$b.c" "$util/osu_util.c" "$util/osu_util_pgas.c" \
            -o "$exe" -lm
    fi
    case $b in put | get | put_nb | get_nb | put_overlap | atomics) per=1 ;; *) per=2 ;; esac
    port=$((port + 1))
    start=$(date +%s%N)
    ip netns exec osu-h1 timeout "$limit" "$lib/shmemrun" -n $per --nnodes 2 --node-rank 1 \
        --master-addr $net.1 --master-port $port "$exe" $arg >/dev/null 2>&1 &
    set +e
    log=$(ip netns exec osu-h0 timeout "$limit" "$lib/shmemrun" -n $per --nnodes 2 --node-rank 0 \
        --master-addr $net.1 --master-port $port "$exe" $arg 2>&1)
    rc=$?
    wait
    set -e
    rows=$(grep -E '^ *[0-9a-z_]*[0-9. ]+$' <<<"$log" || true)
    printf '%-8s %-12s %-6s rc=%-3s %3d rows %6.1f s  last: %s\n' "$provider" "$b" "$arg" "$rc" \
        "$(grep -c . <<<"$rows" || true)" "$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { print (b - a) / 1e9 }')" \
        "$(tail -1 <<<"$rows" | tr -s ' ')"
done
