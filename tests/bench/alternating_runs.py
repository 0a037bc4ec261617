"""The medians of alternating runs, the way every side-by-side benchmark here reports a figure."""
import statistics


def medians(things, repeats, measure):
    """Measures each of `things` `repeats` times, reversing the order on every other repeat so that
    none always goes first (a warm cache, or a neighbour's burst, favours no one), and returns
    {name: {field: median}} for every numeric field of what `measure(thing)` returns. A thing's
    name is its .name, or the thing itself when it is a string."""
    def name(thing):
        return thing if isinstance(thing, str) else thing.name

    things = list(things)
    samples = {name(thing): [] for thing in things}
    for rep in range(repeats):
        for thing in (things if rep % 2 == 0 else list(reversed(things))):
            samples[name(thing)].append(measure(thing))
    return {key: {field: statistics.median(run[field] for run in runs) for field in runs[0]
                  if isinstance(runs[0][field], (int, float))}
            for key, runs in samples.items()}
