"""What a run leaves behind: run directories (rundir, runlock), the report, emitted commands. The manifest of the
files written and atomic JSON, which every writer uses, are `precision_doctor.manifest` and `precision_doctor.jsonio`."""
