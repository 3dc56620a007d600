// The Ember book's JupyterLab extension: a `%%cpp` cell is edited as C++, every other code cell keeps
// the kernel's language (Python, so `%%py` cells stay Python).
//
// Written by hand, with no build step: JupyterLab 4 loads a prebuilt ("federated") extension as a webpack
// module-federation container, a global `window._JUPYTERLAB[name]` with `init(shareScope)` and
// `get(module)`. `init` receives the packages JupyterLab shares with its extensions; `get` answers a
// promise of a factory of the module. JupyterLab asks for the modules that package.json's
// `jupyterlab._build` names: `./extension` (its plugins) and `./style`. The tokens a plugin requires
// must be JupyterLab's own objects, so they come from the shared `@jupyterlab/notebook`, never a copy.
//
// How a cell becomes C++: a code cell's editor highlights the language of its model's `mimeType`, which
// the notebook sets on every code cell from the kernel's `language_info` (at load, at kernel start, on
// insertion). The plugin sets `text/x-c++src` on a cell whose source starts with `%%cpp`, and again
// whenever the notebook or an edit changes it. JupyterLab's own language registry supplies C++
// (`@codemirror/lang-cpp`, in its static files): nothing is fetched. The mime type is not saved in the
// notebook file.
(function () {
  'use strict';

  const NAME = 'ember-book-lab';
  const CPP_MIME = 'text/x-c++src';
  const CPP_MAGIC = /^%%cpp(\s|$)/;
  let shared = null; // the share scope JupyterLab passes to init()

  // The newest version JupyterLab shares of `pkg` (it shares one of each of its own packages).
  function load(pkg) {
    const versions = shared && shared[pkg];
    if (!versions || !Object.keys(versions).length) {
      return Promise.reject(new Error(`${NAME}: JupyterLab shares no ${pkg}`));
    }
    const newest = Object.keys(versions).sort(compareVersions).pop();
    return Promise.resolve(versions[newest].get()).then(factory => factory());
  }

  function compareVersions(a, b) {
    const pa = a.split(/[.-]/).map(Number);
    const pb = b.split(/[.-]/).map(Number);
    for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
      const d = (pa[i] || 0) - (pb[i] || 0);
      if (d) {
        return d;
      }
    }
    return 0;
  }

  // Keep one code cell's model on the right language: C++ for `%%cpp`, else the notebook's.
  function follow(notebook, model) {
    if (model.type !== 'code' || model.__emberCpp) {
      return;
    }
    model.__emberCpp = true;
    const update = () => {
      const cpp = CPP_MAGIC.test(model.sharedModel.getSource());
      const wanted = cpp ? CPP_MIME : notebook.codeMimetype;
      if (model.mimeType !== wanted && (cpp || model.mimeType === CPP_MIME)) {
        model.mimeType = wanted;
      }
    };
    model.mimeTypeChanged.connect(update); // the notebook resets every code cell to the kernel's language
    model.sharedModel.changed.connect(update); // an edit adds or removes the magic
    update();
  }

  function watch(panel) {
    const notebook = panel.content;
    const attach = () => {
      const cells = notebook.model && notebook.model.cells;
      if (!cells) {
        return;
      }
      const all = () => {
        for (let i = 0; i < cells.length; i++) {
          follow(notebook, cells.get(i));
        }
      };
      cells.changed.connect(all);
      all();
    };
    notebook.modelChanged.connect(attach);
    attach();
  }

  function plugins(notebookModule) {
    return [
      {
        id: `${NAME}:cpp-cells`,
        description: 'Highlights %%cpp cells as C++.',
        autoStart: true,
        requires: [notebookModule.INotebookTracker],
        activate: (app, tracker) => {
          tracker.forEach(watch);
          tracker.widgetAdded.connect((_, panel) => watch(panel));
        }
      }
    ];
  }

  // jupyterlab-myst renders each markdown cell alone, so the book's gated solutions
  // (`{solution-start}` … code cells … `{solution-end}`) cannot be joined as the book joins them: the
  // start shows as the solution's header, and the end, an empty box, is hidden.
  const STYLE = `
.jp-MarkdownCell .myst aside.myst-exercise:has(> .myst-exercise-header > .myst-exercise-title:empty):has(> .myst-exercise-body:empty) {
  display: none;
}`;

  function addStyle() {
    const element = document.createElement('style');
    element.id = `${NAME}-style`;
    element.textContent = STYLE;
    document.head.appendChild(element);
    return {};
  }

  window._JUPYTERLAB = window._JUPYTERLAB || {};
  window._JUPYTERLAB[NAME] = {
    init(scope) {
      shared = scope;
    },
    get(module) {
      if (module === './extension') {
        return load('@jupyterlab/notebook').then(notebookModule => () => ({
          __esModule: true,
          default: plugins(notebookModule)
        }));
      }
      if (module === './style') {
        return Promise.resolve(addStyle);
      }
      return Promise.reject(new Error(`${NAME} has no module ${module}`));
    }
  };
})();
