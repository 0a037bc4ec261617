# Sourced by the partition tests: reading the files tests/netns/ticker.sh workers write under
# $ticks (start.HOST.GEN.PID holds the worker's start time, tick.HOST.GEN.PID its last tick), so
# that what is asserted is what the workers themselves saw, not what the agents log.

# started HOST GEN: a worker of HOST in generation GEN has started.
started() { compgen -G "$ticks/start.$1.$2.*" > /dev/null; }
# first_start HOST GEN / last_tick HOST GEN: the time, from the worker's own file.
first_start() { cat $(ls "$ticks"/start."$1"."$2".* | head -1); }
last_tick() { cat $(ls "$ticks"/tick."$1"."$2".* | head -1); }
# later HOST GEN: the first generation above GEN HOST started a worker in (nothing if none).
later() {
  local f g best=
  for f in "$ticks"/start."$1".*; do
    [[ -e $f ]] || continue
    g=${f#"$ticks/start.$1."}; g=${g%%.*}
    if ((g > $2)) && { [[ -z $best ]] || ((g < best)); }; then best=$g; fi
  done
  echo "$best"
}
has_later() { [[ -n $(later "$1" "$2") ]]; }
seconds() { python3 -c "import sys; print(f'{float(sys.argv[1]) - float(sys.argv[2]):.2f}')" "$@"; }
before() { python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$@"; }
# ticking HOST GEN: a worker of HOST in generation GEN has ticked.
ticking() { compgen -G "$ticks/tick.$1.$2.*" > /dev/null; }
