"""What collectors and rules share (docs/ARCHITECTURE.md): stream/node matching, instance capability,
capacity arithmetic, the audit window with its margins and lookbacks, the markers of the GPU-lines query.
Pure: imports only the model and the standard library."""
