"""`batch`: diagnose every model of a zoo, in parallel, resumably; one summary table at the end."""
