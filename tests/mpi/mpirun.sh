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
