"""Plans over kinds: item lists, group normalisation, comparisons, rubrics."""
