/**
 * slimgraph's JupyterLab extension: a sidebar (left panel) with the newest
 * submission's figures of every scheduler found, slimgraph's views in
 * main-area panes, a launcher tile and command-palette commands.
 *
 * - api.ts      the server extension's REST API (slimgraph.jupyter)
 * - sidebar.ts  the sidebar
 * - index.ts    the plugin: commands, palette, launcher, panes, restoring
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  IFrame,
  InputDialog,
  MainAreaWidget,
  Notification,
  WidgetTracker
} from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon } from '@jupyterlab/ui-components';

import { IView } from './api';
import { SlimgraphSidebar } from './sidebar';

import iconSvg from '../style/icon.svg';

export const slimgraphIcon = new LabIcon({ name: 'slimgraph:icon', svgstr: iconSvg });

namespace CommandIDs {
  export const showSidebar = 'slimgraph:show-sidebar';
  export const openView = 'slimgraph:open-view';
  export const openApp = 'slimgraph:open-app';
  export const addScheduler = 'slimgraph:add-scheduler';
}

const CATEGORY = 'slimgraph';
/** dask-labextension's plugin, whose settings hold its sidebar's dashboard URL. */
const DASK_SETTINGS = 'dask-labextension:plugin';

/** A slimgraph view in a main-area pane: an iframe that fills it. */
class ViewPane extends MainAreaWidget<IFrame> {
  constructor(url: string, title: string) {
    const content = new IFrame({
      sandbox: ['allow-scripts', 'allow-same-origin', 'allow-forms', 'allow-popups', 'allow-downloads'],
      referrerPolicy: 'no-referrer'
    });
    content.url = url;
    content.addClass('sg-ViewFrame');
    super({ content });
    // the view has its own tools: no toolbar, the iframe fills the pane
    this.toolbar.hide();
    this.addClass('sg-ViewPane');
    this.id = 'slimgraph-view-' + Private.hash(url);
    this.title.label = title;
    this.title.caption = url;
    this.title.icon = slimgraphIcon;
    this.title.closable = true;
    this.node.dataset.url = url;
  }

  get url(): string {
    return this.content.url;
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'slimgraph:plugin',
  description: "slimgraph's sidebar, views in panes, launcher tile and commands",
  autoStart: true,
  optional: [ICommandPalette, ILauncher, ILayoutRestorer, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    restorer: ILayoutRestorer | null,
    settings: ISettingRegistry | null
  ) => {
    const { commands, shell } = app;
    const tracker = new WidgetTracker<ViewPane>({ namespace: 'slimgraph-views' });

    const openView = (view: { url: string; title: string }): ViewPane => {
      let pane = tracker.find(w => w.url === view.url);
      if (!pane) {
        pane = new ViewPane(view.url, view.title);
        void tracker.add(pane);
        shell.add(pane, 'main');
      }
      shell.activateById(pane.id);
      return pane;
    };

    const sidebar = new SlimgraphSidebar((v: IView) =>
      openView({ url: v.url, title: `slimgraph: ${v.title}` + (v.scheduler ? ` (${v.group})` : '') })
    );
    sidebar.title.icon = slimgraphIcon;
    sidebar.title.caption = 'slimgraph';
    shell.add(sidebar, 'left', { rank: 600 });
    if (restorer) {
      restorer.add(sidebar, 'slimgraph-sidebar');
      void restorer.restore(tracker, {
        command: CommandIDs.openView,
        args: w => ({ url: w.url, title: w.title.label }),
        name: w => w.url
      });
    }

    commands.addCommand(CommandIDs.showSidebar, {
      label: 'Show the slimgraph sidebar',
      caption: 'Schedulers, the latest submission (stock beside slim), views',
      icon: slimgraphIcon,
      execute: () => shell.activateById(sidebar.id)
    });

    commands.addCommand(CommandIDs.openView, {
      label: args => (args.title ? String(args.title) : 'Open a slimgraph view'),
      icon: slimgraphIcon,
      execute: async args => {
        let url = args.url ? String(args.url) : '';
        if (!url) {
          const got = await InputDialog.getText({
            title: 'Open a slimgraph view',
            label: 'URL of the view (a scheduler dashboard\'s /individual-slimgraph-* page, or the app)'
          });
          if (!got.button.accept || !got.value) {
            return;
          }
          url = got.value;
        }
        return openView({ url, title: args.title ? String(args.title) : url });
      }
    });

    commands.addCommand(CommandIDs.openApp, {
      label: args => (args.isLauncher ? 'slimgraph app in a pane' : 'Open the slimgraph dashboard app in a pane'),
      caption: 'The Panel app (stock and slim engines side by side), served by jupyter-server-proxy',
      icon: slimgraphIcon,
      execute: async () => {
        if (!sidebar.summary) {
          await sidebar.refresh();
        }
        const url = sidebar.summary ? sidebar.summary.app : null;
        if (!url) {
          Notification.warning(
            'The slimgraph app is served through jupyter-server-proxy, which is not installed ' +
            '(pip install "slimgraph[dashboard]").'
          );
          shell.activateById(sidebar.id);
          return;
        }
        return openView({ url, title: 'slimgraph dashboard' });
      }
    });

    commands.addCommand(CommandIDs.addScheduler, {
      label: 'Add a scheduler to the slimgraph sidebar…',
      icon: slimgraphIcon,
      execute: async args => {
        let text = args.address ? String(args.address) : '';
        if (!text) {
          const got = await InputDialog.getText({
            title: 'Add a scheduler',
            label: 'Scheduler address (tcp://host:8786) or dashboard URL (http://host:8787/status)'
          });
          if (!got.button.accept || !got.value) {
            return;
          }
          text = got.value;
        }
        shell.activateById(sidebar.id);
        try {
          await sidebar.add(text);
        } catch (e) {
          Notification.error(`slimgraph: ${(e as Error).message || e}`);
        }
      }
    });

    if (palette) {
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category: CATEGORY });
      }
    }
    if (launcher) {
      launcher.add({ command: CommandIDs.openApp, args: { isLauncher: true }, category: 'Other', rank: 1 });
    }

    // dask-labextension's dashboard URL, when it is installed and set: its
    // scheduler is shown too (the server asks the dashboard for its address)
    if (settings && app.hasPlugin(DASK_SETTINGS)) {
      void app.restored.then(async () => {
        try {
          const dask = await settings.load(DASK_SETTINGS);
          const url = String(dask.composite.defaultURL || '');
          if (url) {
            const absolute = new URL(url, window.location.href).href;
            await sidebar.add(absolute, 'dask-labextension');
          }
        } catch (e) {
          // dask-labextension is not installed, or its dashboard has no
          // scheduler that answers: nothing to add
        }
      });
    }
  }
};

namespace Private {
  export function hash(s: string): string {
    let h = 0;
    for (let i = 0; i < s.length; i++) {
      h = (Math.imul(31, h) + s.charCodeAt(i)) | 0;
    }
    return (h >>> 0).toString(36);
  }
}

export default plugin;
