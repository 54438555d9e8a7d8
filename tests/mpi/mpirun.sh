# mpirun.sh: sourced by the mpi tests. dk_mpirun NP CMD... runs CMD on NP
# local ranks, oversubscribing the cores, also as root (as CI runs).
dk_mpirun() {
    local np=$1
    shift
    local extra=()
    if [ "$(id -u)" = 0 ]; then
        extra+=(--allow-run-as-root)
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    mpirun --oversubscribe "${extra[@]}" -np "$np" "$@"
}
# dk_train NAME NP CONFIG [key=value...] trains CONFIG on NP ranks with
# run.dir=$dir/NAME (the caller's $dir), its output in $dir/NAME.log, which
# is shown when the run fails.
dk_train() {
    local name=$1 np=$2 config=$3
    shift 3
    dk_mpirun "$np" "${DK_BUILD:-build}/train" "$config" run.dir="$dir/$name" "$@" > "$dir/$name.log" 2>&1 ||
        { cat "$dir/$name.log"; echo "FAIL: run $name"; exit 1; }
}
