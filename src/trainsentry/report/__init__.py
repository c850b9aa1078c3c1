"""The report: one self-contained HTML file and a PDF, built from committed results and data only."""
