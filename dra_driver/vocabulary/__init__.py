"""Values every layer shares, importing nothing of Tessera's: names and their parsers, quantities, versions,
the GPU model, the error hierarchy."""
