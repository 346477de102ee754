// The status page's rendering: one function per section, from the admin
// API's JSON to DOM nodes, and nothing else (app.js fetches). Every value
// becomes a text node, never markup: descriptor values come from clients.
// When a field of an answer is renamed, the one function that reads it is
// the one to change.
'use strict';

window.tollgateRender = (() => {
  // el returns a new element with the attributes of attrs (skipping null,
  // undefined and false; true gives an empty attribute) and the children,
  // strings and numbers becoming text.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === 'class') e.className = value;
      else e.setAttribute(name, value === true ? '' : String(value));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  // table returns a table with a caption, the column headers of heads
  // and the rows (each an array of cells: a Node, text, or an object
  // {th: content} for a row header).
  function table(caption, heads, rows, rowAttrs) {
    return el('table', {},
      el('caption', {}, caption),
      el('thead', {}, el('tr', {}, heads.map((h) => el('th', {scope: 'col'}, h)))),
      el('tbody', {}, rows.map((cells, i) => el('tr', rowAttrs ? rowAttrs(i) : {}, cells.map((c) =>
        c !== null && typeof c === 'object' && 'th' in c ? el('th', {scope: 'row'}, c.th) : el('td', {}, c))))));
  }

  // utc formats an RFC 3339 time as "2026-11-01 12:00:03 UTC".
  function utc(iso) {
    const d = new Date(iso);
    if (!iso || Number.isNaN(d.getTime())) return '—';
    return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  }

  // relative says how far iso is from now: "in 59 min", "3 s ago".
  function relative(iso, now) {
    const s = Math.round((new Date(iso).getTime() - now) / 1000);
    const a = Math.abs(s);
    const text = a < 90 ? `${a} s` : a < 5400 ? `${Math.round(a / 60)} min`
      : a < 172800 ? `${Math.round(a / 3600)} h` : `${Math.round(a / 86400)} days`;
    return s >= 0 ? `in ${text}` : `${text} ago`;
  }

  // when returns a <time> of iso, in UTC and relative to now; refresh
  // updates the relative part in place.
  function when(iso, now) {
    if (!iso) return '—';
    return el('time', {datetime: iso}, utc(iso), ' (', el('span', {'data-relative': iso}, relative(iso, now)), ')');
  }

  // refresh updates every relative time under root to now, in place, so
  // that the focus stays where it is.
  function refresh(root, now) {
    for (const s of root.querySelectorAll('[data-relative]')) {
      const text = relative(s.dataset.relative, now);
      if (s.textContent !== text) s.textContent = text;
    }
  }

  // rate formats a number per second.
  function rate(n) {
    return typeof n === 'number' ? n.toFixed(2) : '—';
  }

  // entries formats descriptor entries as "key=value, key=value".
  function entries(list) {
    return (list || []).map((e) => `${e.key}=${e.value}`).join(', ');
  }

  // unavailable says that the instance does not serve a section's route.
  function unavailable() {
    return el('p', {class: 'unavailable'}, 'Not available on this instance.');
  }

  // failure says that a section's call failed, and why.
  function failure(err) {
    return el('p', {class: 'error'}, `Could not load: ${err.message}`);
  }

  // status renders GET /v1/status.
  function status(s, now) {
    const rules = s.rules || {};
    const fleet = s.fleet ? (s.fleet.subscribed ? 'subscribed' : 'not subscribed: changes from other instances are not heard')
      : 'none (no shared store)';
    const rows = [
      ['Version', s.version, 'version'],
      ['Store', s.store, 'store'],
      ['Breaker', s.breaker || '—', 'breaker'],
      ['Degraded', s.degraded || 'no', 'degraded'],
      ['Fleet channel', fleet, 'fleet'],
      ['Rules source', rules.source, 'rules-source'],
      ['Rules hash', el('code', {}, rules.hash || '—'), 'rules-hash'],
      ['Rules loaded', when(rules.loaded_at, now), 'rules-loaded'],
      ['Reloads', `${rules.reloads} (${rules.failures} failed)`, 'reloads'],
      ['Last reload error', rules.last_error || 'none', 'rules-error'],
      ['Live overrides', s.overrides, 'overrides'],
    ];
    return el('dl', {class: 'status'}, rows.map(([term, value, field]) => [
      el('dt', {}, term),
      el('dd', {'data-field': field, class: field === 'rules-error' && rules.last_error ? 'error' : null}, value),
    ]));
  }

  // top renders the entries of one GET /v1/top answer that belong to rule
  // (an entry of GET /v1/rules): the top limited clients, busiest first.
  // answer is null when the instance does not serve /v1/top.
  function top(answer, rule) {
    if (answer === null) return unavailable();
    if (answer instanceof Error) return failure(answer);
    const list = (answer.entries || []).filter((e) => !rule.limit || !e.limit || e.limit === rule.limit);
    if (list.length === 0) return el('p', {class: 'quiet'}, 'None limited.');
    return el('ol', {class: 'top'}, list.map((e) => el('li', {},
      el('code', {}, entries(e.descriptor)), ': ',
      `${e.rejected} rejected of ${e.requests}`,
      e.error ? ` (counts within ${e.error})` : '')));
  }

  // rules renders GET /v1/rules, with topOf(rule) the answer of GET
  // /v1/top for each rule (see top).
  function rules(data, topOf) {
    const list = data.rules || [];
    if (list.length === 0) return el('p', {class: 'quiet'}, 'No rules.');
    return table('Rules: decisions and rejections per second over the last 1 and 5 minutes, '
      + 'the hottest client\'s share of its limit, and the top limited clients over 5 minutes',
    ['Domain', 'Rule', 'Limit', 'Decisions/s 1m', 'Decisions/s 5m', 'Rejected/s 1m', 'Rejected/s 5m', 'Hottest', 'Top limited clients'],
    list.map((r) => [
      r.domain,
      {th: r.rule},
      [`${r.requests_per_unit} per ${r.unit}`, r.limit ? ` (${r.limit})` : ''],
      rate(r.decisions_per_second_1m), rate(r.decisions_per_second_5m),
      rate(r.rejected_per_second_1m), rate(r.rejected_per_second_5m),
      typeof r.hottest_ratio === 'number'
        ? el('span', {class: r.hottest_ratio > 1 ? 'over' : null},
          `${Math.round(r.hottest_ratio * 100)} %`, r.hottest_ratio > 1 ? ' over' : '')
        : '—',
      top(topOf(r), r),
    ]), (i) => ({'data-rule': list[i].rule, 'data-domain': list[i].domain}));
  }

  // overrides renders GET /v1/overrides, each with its delete button.
  function overrides(data, now) {
    const list = data.overrides || [];
    if (list.length === 0) return el('p', {class: 'quiet'}, 'No live overrides.');
    return table('Live overrides, oldest first',
      ['Descriptor', 'Domain', 'Change', 'Expires', 'Reason', 'Created by', 'Id', 'Delete'],
      list.map((o) => [
        {th: el('code', {}, entries(o.entries))},
        o.domain,
        o.limit ? `limit ${o.limit.requests_per_unit} per ${o.limit.unit}` : `limit × ${o.multiplier}`,
        when(o.expires_at, now),
        o.reason || '',
        o.created_by || '',
        el('code', {}, o.id),
        el('button', {type: 'button', 'data-delete': o.id, 'aria-label': `Delete override ${o.id} of ${entries(o.entries)}`}, 'Delete'),
      ]), (i) => ({'data-override': list[i].id}));
  }

  // hash shortens a rule set's hash for a table; the whole is in its
  // data-hash and title.
  function hash(h) {
    return h ? el('code', {'data-hash': h, title: h}, h.slice(0, 12)) : '—';
  }

  // history renders GET /v1/rules/history, newest first.
  function history(data, now) {
    const list = data.entries || [];
    if (list.length === 0) return el('p', {class: 'quiet'}, 'No rule sets yet.');
    const domains = (e) => [['added', e.added], ['removed', e.removed], ['changed', e.changed]]
      .filter(([, names]) => names && names.length).map(([what, names]) => `${what}: ${names.join(', ')}`).join('; ');
    return table('Rule sets loaded and reloads failed, newest first',
      ['Time', 'Outcome', 'Reason', 'Hash', 'Previous', 'Domains', 'Errors'],
      list.map((e) => {
        const failed = (e.errors || []).length > 0;
        return [
          when(e.time, now),
          {th: failed ? `failed${e.repeats ? ` (and ${e.repeats} more)` : ''}` : 'loaded'},
          e.reason,
          hash(e.hash),
          hash(e.previous),
          domains(e) || '—',
          failed ? el('ul', {class: 'errors'}, e.errors.map((line) => el('li', {}, line))) : '',
        ];
      }), (i) => ({class: (list[i].errors || []).length ? 'failed' : null}));
  }

  return Object.freeze({el, refresh, unavailable, failure, status, top, rules, overrides, history});
})();
