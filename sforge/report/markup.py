"""The HTML of the pages' longest parts, written directly rather than through the templates'
loops (sortable tables, a task page's submissions), escaped by markupsafe as the templates
escape."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup, escape

from sforge.grading.feedback import Detail
from sforge.report.views import Cell, SubmissionView, detail_failed, failed_first


def table_html(table_id: str, header: list[str], rows: list[list[Cell]],
               text_cols: int) -> Markup:
    """A sortable table of cells: the first `text_cols` columns text, the rest numbers
    (data-v is what the sorting script compares). Written directly, as submission_html
    is: the index's task table (200 tasks × every source) through the template's loops
    cost a report after one change 40 ms; the same markup, escaped by the same function."""
    e = _memo_escape
    out = [f'<div class="scroll">\n<table id="{e(table_id)}" class="sortable">\n<thead><tr>']
    out += [f'<th class="text">{e(h)}</th>' if i < text_cols else f"<th>{e(h)}</th>"
            for i, h in enumerate(header)]
    out.append("</tr></thead>\n<tbody>\n")
    for row in rows:
        out.append("<tr>")
        for i, c in enumerate(row):
            out.append(('<td class="text src"' if c.color else '<td class="text"')
                       if i < text_cols else "<td")
            if c.sort:
                out.append(f' data-v="{e(c.sort)}"')
            if c.style:
                out.append(f' style="{e(c.style)}"')
            if c.title:
                out.append(f' title="{e(c.title)}"')
            out.append(">")
            if c.color:
                out.append(f'<span class="sw" style="background:{e(c.color)}"></span>')
            out.append(f'<a href="{e(c.href)}">{e(c.text)}</a></td>' if c.href
                       else f"{e(c.text)}</td>")
        out.append("</tr>\n")
    out.append("</tbody>\n</table>\n</div>")
    return Markup("".join(out))


_ESCAPED: dict[str, str] = {}


def _memo_escape(value: Any) -> str:
    """markupsafe's escape, remembered for text: a page repeats its sources, colours,
    verdicts, test names and statuses hundreds of times (escaping was a third of a cold
    page). Numbers are not remembered (1 and 1.0 are one key to a dict)."""
    if type(value) is not str:
        return str(escape(value))
    out = _ESCAPED.get(value)
    if out is None:
        if len(_ESCAPED) > 100_000:
            _ESCAPED.clear()
        out = _ESCAPED[value] = str(escape(value))
    return out


_DETAIL_ROWS: dict[Any, str] = {}


def _detail_row(d: Detail) -> str:
    """A row of a submission's details table, remembered: submissions mostly repeat the
    same tests with the same verdicts (a zero score by its sign too: -0.0 == 0.0)."""
    key = d if d.score != 0.0 else (d, str(d.score))
    out = _DETAIL_ROWS.get(key)
    if out is None:
        if len(_DETAIL_ROWS) > 100_000:
            _DETAIL_ROWS.clear()
        e = _memo_escape
        score = "" if d.score is None else f"{d.score:.6g}"
        row = '<tr class="failed-test">' if detail_failed(d) else "<tr>"
        out = _DETAIL_ROWS[key] = (
            f'{row}<td class="text test">{e(d.test)}</td><td class="text">{e(d.status)}</td>\n'
            f'<td>{score}</td><td class="text long">{e(d.message)}</td></tr>\n')
    return out


def submission_html(index: int, s: SubmissionView) -> str:
    """One submission of a task page (the page's longest part: a task of 500 submissions
    with their details), written directly rather than through the template's loop, which
    cost 0.4 ms each; the same markup, escaped by the same function."""
    e = _memo_escape
    out = [f'<details class="submission" id="sub-{index}">\n<summary><span class="sw" '
           f'style="background:{e(s.color)}"></span>{e(s.source)} · {e(s.name)} ·\n'
           f'<span class="{e(s.verdict)}">{e(s.verdict)}</span>\n']
    if s.score:
        out.append(f" · raw {e(s.score)}")
    if s.rescaled:
        out.append(f" · rescaled {e(s.rescaled)}")
    if s.hours:
        out.append(f" · {e(s.hours)} h")
    out.append('</summary>\n<dl class="facts">\n')
    if s.summary:
        out.append(f"<dt>summary</dt><dd>{e(s.summary)}</dd>")
    if s.reason:
        out.append(f'<dt>reason</dt><dd class="reason">{e(s.reason)}</dd>')
    out.append(f"<dt>archive</dt><dd>{e(s.sha)}…</dd>\n")
    if s.agent or s.model:
        out.append(f"<dt>agent</dt><dd>{e(s.agent)} {e(s.model)}</dd>")
    if s.submitted:
        out.append(f"<dt>submitted</dt><dd>{e(s.submitted)}</dd>")
    out.append(f'<dt>graded</dt><dd>{e(s.graded)} in {e(s.duration)} s</dd>\n'
               f'<dt>files</dt><dd><a class="result-json" href="{e(s.links.result)}">'
               "result JSON</a>")
    if s.links.log:
        out.append(f' · <a class="judge-log" href="{e(s.links.log)}">judge log</a>')
    out.append("</dd>\n</dl>\n")
    f = s.feedback
    if f.error:
        out.append(f'<p class="failed">{e(f.error)}</p>')
    if f.details:
        details = failed_first(f.details)
        failed = sum(map(detail_failed, details))
        out.append(f'<p class="note">{len(details)} tests, <span class="'
                   f'{"failed" if failed else "valid"}">{failed} failed</span> (listed first)'
                   f'</p>\n<input type="search" class="filter" placeholder="filter tests" '
                   f'aria-label="filter the tests of submission {index}">\n'
                   '<div class="scroll"><table class="details">\n<thead><tr><th class="text">'
                   'test</th><th class="text">status</th><th>score</th>\n<th class="text">'
                   "message</th></tr></thead>\n<tbody>\n")
        out += map(_detail_row, details)
        out.append("</tbody></table></div>\n")
    if f.metrics:
        out.append('<div class="scroll"><table class="metrics"><thead><tr><th class="text">'
                   "metric</th><th>value</th></tr></thead>\n<tbody>")
        out += [f'<tr><td class="text">{e(k)}</td><td>{e(v)}</td></tr>\n'
                for k, v in f.metrics.items()]
        out.append("</tbody></table></div>\n")
    if f.rejected:
        out.append('<p class="note">Refused archive members:</p>\n<ul>')
        out += [f"<li>{e(r['path'])}: {e(r['reason'])}</li>" for r in f.rejected]
        out.append("</ul>\n")
    out.append("</details>\n")
    return "".join(out)


