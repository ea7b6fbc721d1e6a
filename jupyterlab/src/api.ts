/**
 * The server extension's REST API (slimgraph.jupyter.handlers), under
 * <base_url>slimgraph-lab/api/. Everything the sidebar shows comes from here:
 * the server reads the schedulers' slimgraph_* handlers, never pages.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

export interface IFigureSpec {
  key: string;
  label: string;
  unit: string;
  indent: boolean;
}

export interface IFigure {
  value: number | null;
  text: string;
}

export interface ILatest {
  submission_id: number;
  tasks: number;
  ended: number;
  status: string;
  ingestion: string | null;
  materialization: string | null;
  figures: { [key: string]: IFigure };
}

export interface IRunning {
  submission_id: number;
  elapsed_s: number;
  phase: string | null;
  tasks: number;
}

export interface IScheduler {
  id: string;
  address: string;
  source: string;
  label: string;
  group: string;
  kind: string | null;
  dashboard: string | null;
  state: 'ok' | 'waiting' | 'connecting' | 'error';
  error: string;
  silent_s: number | null;
  rss: number | null;
  rss_text: string | null;
  tasks: number | null;
  running: IRunning[];
  latest: ILatest | null;
}

export interface IGroup {
  title: string;
  source: string;
  members: string[];
  ratios: { [key: string]: IFigure | null } | null;
}

export interface ISummary {
  figures: IFigureSpec[];
  schedulers: IScheduler[];
  groups: IGroup[];
  app: string | null;
  time: number;
  added?: string;
}

export interface IView {
  group: string;
  title: string;
  url: string;
  scheduler: string | null;
}

export async function requestAPI<T>(
  endPoint: string,
  init: RequestInit = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'slimgraph-lab', 'api', endPoint);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  let data: any = text;
  try {
    data = text.length ? JSON.parse(text) : {};
  } catch (e) {
    // not JSON: keep the text for the error below
  }
  if (!response.ok) {
    const why = (data && data.error) || data.message || text || response.statusText;
    throw new ServerConnection.ResponseError(response, String(why));
  }
  return data as T;
}

export function getSummary(): Promise<ISummary> {
  return requestAPI<ISummary>('summary');
}

export function addScheduler(address: string, source = 'entered'): Promise<ISummary> {
  return requestAPI<ISummary>('schedulers', {
    method: 'POST',
    body: JSON.stringify({ address, source })
  });
}

export function removeScheduler(address: string): Promise<{ removed: boolean }> {
  return requestAPI('schedulers?address=' + encodeURIComponent(address), {
    method: 'DELETE'
  });
}

export async function getViews(): Promise<IView[]> {
  return (await requestAPI<{ views: IView[] }>('views')).views;
}
