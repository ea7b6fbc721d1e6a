/**
 * The slimgraph sidebar: the schedulers found (a running `slimgraph
 * dashboard`'s engines, SLIMGRAPH_SCHEDULER, what the user entered,
 * dask-labextension's), the newest submission's figures on each (stock
 * beside slim with ratios when a group has both), and slimgraph's views,
 * each opened in a main-area pane.
 *
 * Plain DOM in a Lumino widget; the state comes from the server extension
 * (api.ts) once a second while the sidebar is visible.
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import {
  addScheduler,
  getSummary,
  getViews,
  IScheduler,
  ISummary,
  IView,
  removeScheduler
} from './api';

/** The engine colours of slimgraph.views.palette (Okabe-Ito). */
const ENGINE_COLORS: { [kind: string]: string } = {
  stock: '#D55E00',
  slim: '#0072B2'
};

const POLL_MS = 1000;
const VIEWS_EVERY = 5; // polls

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: { [k: string]: string } = {},
  ...children: (Node | string | null)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') {
      e.className = v;
    } else {
      e.setAttribute(k, v);
    }
  }
  for (const c of children) {
    if (c !== null) {
      e.append(c);
    }
  }
  return e;
}

function ago(epochSeconds: number, now: number): string {
  const s = Math.max(0, now - epochSeconds);
  if (s < 60) {
    return `${s.toFixed(0)} s ago`;
  }
  if (s < 3600) {
    return `${(s / 60).toFixed(0)} min ago`;
  }
  return `${(s / 3600).toFixed(1)} h ago`;
}

export class SlimgraphSidebar extends Widget {
  constructor(openView: (view: IView) => void) {
    super();
    this._openView = openView;
    this.id = 'slimgraph-sidebar';
    this.addClass('sg-Sidebar');

    this._input = el('input', {
      class: 'jp-mod-styled sg-Sidebar-input',
      type: 'text',
      placeholder: 'scheduler address or dashboard URL',
      'aria-label': 'scheduler address or dashboard URL'
    });
    this._input.addEventListener('keydown', ev => {
      if (ev.key === 'Enter') {
        void this._add();
      }
    });
    const addButton = el(
      'button',
      { class: 'jp-mod-styled jp-mod-accept sg-Sidebar-add', type: 'button' },
      'Add'
    );
    addButton.addEventListener('click', () => void this._add());
    this._message = el('div', { class: 'sg-Sidebar-message' });
    this._schedulers = el('div', { class: 'sg-Sidebar-schedulers' });
    this._views = el('div', { class: 'sg-Sidebar-views' });

    this.node.append(
      el('header', { class: 'sg-Sidebar-header' }, el('h2', {}, 'slimgraph')),
      el('section', { class: 'sg-Sidebar-section sg-Sidebar-summary' },
        el('h3', {}, 'Latest submission'),
        this._schedulers),
      el('section', { class: 'sg-Sidebar-section' },
        el('h3', {}, 'Views'),
        this._views),
      el('section', { class: 'sg-Sidebar-section' },
        el('h3', {}, 'Add a scheduler'),
        el('div', { class: 'sg-Sidebar-form' }, this._input, addButton),
        this._message)
    );
    this._schedulers.append(el('p', { class: 'sg-Sidebar-note' }, 'Looking for schedulers…'));
  }

  /** The last state received (for commands). */
  get summary(): ISummary | null {
    return this._summary;
  }

  /** Add a scheduler (an address or a dashboard URL). */
  async add(text: string, source = 'entered'): Promise<void> {
    const summary = await addScheduler(text, source);
    this._render(summary);
    this._viewsAge = VIEWS_EVERY; // list its views at the next poll
  }

  /** Refresh now (and keep polling while visible). */
  async refresh(): Promise<void> {
    try {
      const summary = await getSummary();
      this._render(summary);
      if (++this._viewsAge >= VIEWS_EVERY) {
        this._viewsAge = 0;
        this._renderViews(await getViews());
      }
      this.node.dataset.sgError = '';
    } catch (e) {
      this.node.dataset.sgError = String(e);
      this._schedulers.replaceChildren(
        el('p', { class: 'sg-Sidebar-error' }, `The slimgraph server extension did not answer: ${e}`)
      );
    }
  }

  protected onAfterShow(msg: Message): void {
    this._viewsAge = VIEWS_EVERY;
    this._schedule(0);
  }

  protected onAfterHide(msg: Message): void {
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
      this._timer = null;
    }
  }

  dispose(): void {
    this.onAfterHide(null as unknown as Message);
    super.dispose();
  }

  private _schedule(ms: number): void {
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
    }
    this._timer = window.setTimeout(async () => {
      this._timer = null;
      await this.refresh();
      if (this.isVisible && !this.isDisposed) {
        this._schedule(POLL_MS);
      }
    }, ms);
  }

  private async _add(): Promise<void> {
    const text = this._input.value.trim();
    if (!text) {
      return;
    }
    this._message.textContent = `Adding ${text}…`;
    this._message.className = 'sg-Sidebar-message';
    try {
      await this.add(text);
      this._input.value = '';
      this._message.textContent = '';
    } catch (e) {
      this._message.textContent = String((e as Error).message || e);
      this._message.className = 'sg-Sidebar-message sg-Sidebar-error';
    }
  }

  private _render(summary: ISummary): void {
    this._summary = summary;
    const byId = new Map(summary.schedulers.map(s => [s.id, s]));
    const out: HTMLElement[] = [];
    for (const group of summary.groups) {
      const members = group.members.map(id => byId.get(id)!).filter(Boolean);
      out.push(this._renderGroup(summary, group.title, group.source, members, group.ratios));
    }
    if (!out.length) {
      out.push(
        el('p', { class: 'sg-Sidebar-note' },
          'No scheduler found. Start `slimgraph dashboard`, or add a scheduler ' +
          'address (tcp://host:8786) or its dashboard URL below.')
      );
    }
    this._schedulers.replaceChildren(...out);
    this.node.dataset.sgSchedulers = String(summary.schedulers.length);
  }

  private _renderGroup(
    summary: ISummary,
    title: string,
    source: string,
    members: IScheduler[],
    ratios: ISummary['groups'][number]['ratios']
  ): HTMLElement {
    const now = summary.time;
    const box = el('div', { class: 'sg-Group', 'data-source': source });
    const head = el('div', { class: 'sg-Group-title' },
      el('span', { class: 'sg-Group-source' }, source),
      source === title ? null : el('span', { class: 'sg-Group-name' }, ` ${title}`));
    box.append(head);

    for (const s of members) {
      const line = el('div', {
        class: `sg-Engine sg-mod-${s.state}`,
        'data-sg-scheduler': s.id,
        'data-kind': s.kind || '',
        'data-state': s.state
      });
      const swatch = el('span', { class: 'sg-Engine-kind' }, s.kind || '?');
      swatch.style.borderColor = ENGINE_COLORS[s.kind || ''] || 'var(--jp-border-color1)';
      swatch.style.color = ENGINE_COLORS[s.kind || ''] || 'inherit';
      line.append(swatch, el('span', { class: 'sg-Engine-label', title: s.address }, s.label));
      if (s.source === 'entered') {
        const rm = el('button', { class: 'sg-Engine-remove', title: 'stop showing this scheduler', type: 'button' }, '×');
        rm.addEventListener('click', async () => {
          await removeScheduler(s.address);
          await this.refresh();
        });
        line.append(rm);
      }
      const facts: string[] = [];
      if (s.state === 'connecting') {
        facts.push('connecting…');
      } else if (s.state === 'error') {
        facts.push(s.error);
      } else {
        if (s.rss_text) {
          facts.push(`RSS ${s.rss_text}`);
        }
        if (s.tasks !== null) {
          facts.push(`${s.tasks.toLocaleString()} tasks held`);
        }
        if (s.state === 'waiting' && s.silent_s !== null) {
          facts.push(`its event loop has not answered for ${s.silent_s.toFixed(0)} s`);
        }
      }
      for (const r of s.running) {
        facts.push(
          `update_graph #${r.submission_id} running for ${r.elapsed_s.toFixed(1)} s` +
          (r.phase ? ` (${r.phase})` : '') +
          (r.tasks ? `, ${r.tasks.toLocaleString()} tasks` : '')
        );
      }
      if (s.latest) {
        facts.push(
          `latest: #${s.latest.submission_id}, ${s.latest.tasks.toLocaleString()} tasks, ` +
          `${s.latest.status}, ended ${ago(s.latest.ended, now)}`
        );
      }
      box.append(line, el('div', { class: 'sg-Engine-facts', 'data-sg-scheduler': s.id }, facts.join(' · ')));
    }

    const withLatest = members.filter(s => s.latest);
    if (!withLatest.length) {
      if (members.some(s => s.state === 'ok' || s.state === 'waiting')) {
        box.append(el('p', { class: 'sg-Sidebar-note' }, 'No submission recorded yet.'));
      }
      return box;
    }
    // one row of labels, one of values per figure: three value columns fit
    // a narrow sidebar (stock, slim, ratio)
    const table = el('table', { class: 'sg-Summary', 'data-group': title });
    const ncols = withLatest.length + (ratios ? 1 : 0);
    const headRow = el('tr', {});
    for (const s of withLatest) {
      const th = el('th', {
        scope: 'col',
        'data-kind': s.kind || '',
        'data-submission': String(s.latest!.submission_id),
        title: `${s.label}: submission #${s.latest!.submission_id}, ${s.latest!.tasks.toLocaleString()} tasks`
      }, s.kind || s.label);
      th.style.color = ENGINE_COLORS[s.kind || ''] || 'inherit';
      headRow.append(th);
    }
    if (ratios) {
      headRow.append(el('th', { scope: 'col', title: 'stock / slim' }, 'ratio'));
    }
    table.append(el('thead', {}, headRow));
    const body = el('tbody');
    for (const f of summary.figures) {
      const label = el('tr', { class: 'sg-Summary-label' },
        el('th', { scope: 'colgroup', colspan: String(ncols), class: f.indent ? 'sg-mod-indent' : '' }, f.label));
      const row = el('tr', { 'data-key': f.key });
      let any = false;
      for (const s of withLatest) {
        const fig = s.latest!.figures[f.key];
        any = any || (fig && fig.value !== null);
        row.append(el('td', {
          'data-kind': s.kind || '',
          'data-key': f.key,
          'data-value': fig && fig.value !== null ? String(fig.value) : ''
        }, fig ? fig.text : '-'));
      }
      if (ratios) {
        const r = ratios[f.key];
        row.append(el('td', {
          class: 'sg-mod-ratio', 'data-key': f.key, 'data-kind': 'ratio',
          'data-value': r ? String(r.value) : ''
        }, r ? r.text : '-'));
      }
      if (any) {
        body.append(label, row);
      }
    }
    table.append(body);
    box.append(table);
    // how the slim engine ingested (stock always does it on its event loop)
    const how = withLatest
      .filter(s => s.kind !== 'stock' && s.latest!.ingestion)
      .map(s => `${s.kind || s.label} ingestion: ${s.latest!.ingestion}`);
    if (how.length) {
      box.append(el('div', { class: 'sg-Sidebar-note' }, how.join(' · ')));
    }
    return box;
  }

  private _renderViews(views: IView[]): void {
    const key = JSON.stringify(views);
    if (key === this._viewsKey) {
      return;
    }
    this._viewsKey = key;
    if (!views.length) {
      this._views.replaceChildren(el('p', { class: 'sg-Sidebar-note' },
        'No view yet: the schedulers found have no dashboard with slimgraph\'s pages.'));
      return;
    }
    const groups = new Map<string, IView[]>();
    for (const v of views) {
      groups.set(v.group, [...(groups.get(v.group) || []), v]);
    }
    const out: HTMLElement[] = [];
    for (const [group, vs] of groups) {
      const list = el('div', { class: 'sg-Views' });
      for (const v of vs) {
        const b = el('button', {
          class: 'sg-View jp-mod-styled', type: 'button', title: v.url, 'data-url': v.url
        }, v.title);
        b.addEventListener('click', () => this._openView(v));
        list.append(b);
      }
      out.push(el('div', { class: 'sg-Views-group' }, el('div', { class: 'sg-Views-title' }, group), list));
    }
    this._views.replaceChildren(...out);
  }

  private _openView: (view: IView) => void;
  private _input: HTMLInputElement;
  private _message: HTMLElement;
  private _schedulers: HTMLElement;
  private _views: HTMLElement;
  private _summary: ISummary | null = null;
  private _timer: number | null = null;
  private _viewsAge = 0;
  private _viewsKey = '';
}
