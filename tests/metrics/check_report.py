"""Checks a `ctitan report` page with an independent parser: every <svg> block must be well-formed
XML (xml.etree), and each polyline's data-run / data-metric / data-points and its points list must
agree. Prints one JSON object: {"charts": [...metric...], "lines": {"run/metric": n_points}}.

usage: check_report.py REPORT_HTML
"""
import json
import re
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def main():
    html = open(sys.argv[1], encoding="utf-8").read()
    assert html.startswith("<!DOCTYPE html>"), "not an HTML page"
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", ""), \
        "the page must be self-contained"
    charts, lines = [], {}
    for block in re.findall(r"<svg .*?</svg>", html, flags=re.S):
        svg = ET.fromstring(block)  # raises on malformed XML
        charts.append(svg.get("data-metric"))
        for line in svg.iter(SVG + "polyline"):
            points = line.get("points").split()
            n = int(line.get("data-points"))
            assert len(points) == n, (line.get("data-run"), line.get("data-metric"), len(points), n)
            for p in points:
                x, y = (float(v) for v in p.split(","))
                assert 0 <= x <= float(svg.get("width")) and 0 <= y <= float(svg.get("height")), p
            lines[line.get("data-run") + "/" + line.get("data-metric")] = n
    print(json.dumps({"charts": charts, "lines": lines}))


if __name__ == "__main__":
    main()
