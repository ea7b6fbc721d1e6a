"use strict";(self.rspackChunkslimgraph=self.rspackChunkslimgraph||[]).push([[700],{646(e,r,o){var t=o(601),a=o.n(t),n=o(314),i=(o.n(n))()(a());i.push([e.id,`/* slimgraph's sidebar and view panes (JupyterLab's own CSS variables:
   light and dark themes alike). Engine colours: slimgraph.views.palette. */

.sg-Sidebar {
  background: var(--jp-layout-color1);
  color: var(--jp-ui-font-color1);
  font-size: var(--jp-ui-font-size1);
  overflow-y: auto;
  padding: 0 10px 12px;
}

.sg-Sidebar-header h2 {
  font-size: var(--jp-ui-font-size3);
  font-weight: 600;
  margin: 10px 0 4px;
}

.sg-Sidebar-section h3 {
  font-size: var(--jp-ui-font-size1);
  text-transform: uppercase;
  letter-spacing: 0.04em;
  color: var(--jp-ui-font-color2);
  margin: 14px 0 6px;
  font-weight: 600;
}

.sg-Sidebar-note {
  color: var(--jp-ui-font-color2);
  margin: 4px 0;
}

.sg-Sidebar-error,
.sg-mod-error .sg-Engine-label {
  color: var(--jp-error-color1);
}

.sg-Sidebar-message {
  margin-top: 4px;
  word-break: break-word;
}

.sg-Sidebar-form {
  display: flex;
  gap: 6px;
}

.sg-Sidebar-input {
  flex: 1 1 auto;
  min-width: 0;
}

.sg-Group {
  border: 1px solid var(--jp-border-color2);
  border-radius: 4px;
  padding: 6px 8px;
  margin-bottom: 8px;
}

.sg-Group-title {
  font-weight: 600;
  margin-bottom: 4px;
}

.sg-Group-name {
  font-weight: normal;
  color: var(--jp-ui-font-color2);
}

.sg-Engine {
  display: flex;
  align-items: center;
  gap: 6px;
  margin-top: 4px;
}

.sg-Engine-kind {
  border: 2px solid;
  border-radius: 3px;
  padding: 0 4px;
  font-weight: 600;
  font-size: var(--jp-ui-font-size0);
}

.sg-Engine-label {
  flex: 1 1 auto;
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
}

.sg-mod-waiting .sg-Engine-label::after {
  content: ' (not answering)';
  color: var(--jp-warn-color1);
}

.sg-Engine-remove {
  border: none;
  background: none;
  color: var(--jp-ui-font-color2);
  cursor: pointer;
  font-size: 14px;
}

.sg-Engine-facts {
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
  margin: 1px 0 2px 2px;
  word-break: break-word;
}

table.sg-Summary {
  border-collapse: collapse;
  width: 100%;
  margin-top: 6px;
  font-variant-numeric: tabular-nums;
}

table.sg-Summary th,
table.sg-Summary td {
  padding: 2px 4px;
  border-bottom: 1px solid var(--jp-border-color2);
  text-align: right;
  white-space: nowrap;
}

table.sg-Summary {
  table-layout: fixed;
}

table.sg-Summary thead th {
  font-weight: 600;
}

table.sg-Summary tr.sg-Summary-label th {
  text-align: left;
  font-weight: normal;
  white-space: normal;
  color: var(--jp-ui-font-color2);
  border-bottom: none;
  padding-top: 5px;
  padding-bottom: 0;
}

table.sg-Summary tr.sg-Summary-label th.sg-mod-indent {
  padding-left: 14px;
}

table.sg-Summary td.sg-mod-ratio {
  font-weight: 600;
}

.sg-Views-group {
  margin-bottom: 8px;
}

.sg-Views-title {
  color: var(--jp-ui-font-color2);
  margin-bottom: 3px;
}

.sg-Views {
  display: flex;
  flex-wrap: wrap;
  gap: 4px;
}

button.sg-View {
  cursor: pointer;
  background: var(--jp-layout-color2);
  border: 1px solid var(--jp-border-color1);
  border-radius: 3px;
  padding: 2px 8px;
  color: var(--jp-ui-font-color1);
}

button.sg-View:hover {
  background: var(--jp-layout-color3);
}

/* a view fills its pane (its toolbar is hidden): the iframe edge to edge */
.sg-ViewPane .sg-ViewFrame,
.sg-ViewPane .sg-ViewFrame iframe {
  width: 100%;
  height: 100%;
  border: 0;
}
`,""]),o.d(r,{},{A:i})},314(e){e.exports=function(e){var r=[];return r.toString=function(){return this.map(function(r){var o="",t=void 0!==r[5];return r[4]&&(o+="@supports (".concat(r[4],") {")),r[2]&&(o+="@media ".concat(r[2]," {")),t&&(o+="@layer".concat(r[5].length>0?" ".concat(r[5]):""," {")),o+=e(r),t&&(o+="}"),r[2]&&(o+="}"),r[4]&&(o+="}"),o}).join("")},r.i=function(e,o,t,a,n){"string"==typeof e&&(e=[[null,e,void 0]]);var i={};if(t)for(var s=0;s<this.length;s++){var p=this[s][0];null!=p&&(i[p]=!0)}for(var l=0;l<e.length;l++){var c=[].concat(e[l]);t&&i[c[0]]||(void 0!==n&&(void 0===c[5]||(c[1]="@layer".concat(c[5].length>0?" ".concat(c[5]):""," {").concat(c[1],"}")),c[5]=n),o&&(c[2]&&(c[1]="@media ".concat(c[2]," {").concat(c[1],"}")),c[2]=o),a&&(c[4]?(c[1]="@supports (".concat(c[4],") {").concat(c[1],"}"),c[4]=a):c[4]="".concat(a)),r.push(c))}},r}},601(e){e.exports=function(e){return e[1]}},72(e){var r=[];function o(e){for(var o=-1,t=0;t<r.length;t++)if(r[t].identifier===e){o=t;break}return o}function t(e,t){for(var a={},n=[],i=0;i<e.length;i++){var s=e[i],p=t.base?s[0]+t.base:s[0],l=a[p]||0,c="".concat(p," ").concat(l);a[p]=l+1;var d=o(c),u={css:s[1],media:s[2],sourceMap:s[3],supports:s[4],layer:s[5]};if(-1!==d)r[d].references++,r[d].updater(u);else{var g=function(e,r){var o=r.domAPI(r);return o.update(e),function(r){r?(r.css!==e.css||r.media!==e.media||r.sourceMap!==e.sourceMap||r.supports!==e.supports||r.layer!==e.layer)&&o.update(e=r):o.remove()}}(u,t);t.byIndex=i,r.splice(i,0,{identifier:c,updater:g,references:1})}n.push(c)}return n}e.exports=function(e,a){var n=t(e=e||[],a=a||{});return function(e){e=e||[];for(var i=0;i<n.length;i++){var s=o(n[i]);r[s].references--}for(var p=t(e,a),l=0;l<n.length;l++){var c=o(n[l]);0===r[c].references&&(r[c].updater(),r.splice(c,1))}n=p}}},659(e){var r={};e.exports=function(e,o){var t=function(e){if(void 0===r[e]){var o=document.querySelector(e);if(window.HTMLIFrameElement&&o instanceof window.HTMLIFrameElement)try{o=o.contentDocument.head}catch(e){o=null}r[e]=o}return r[e]}(e);if(!t)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");t.appendChild(o)}},540(e){e.exports=function(e){var r=document.createElement("style");return e.setAttributes(r,e.attributes),e.insert(r,e.options),r}},56(e,r,o){e.exports=function(e){var r=o.nc;r&&e.setAttribute("nonce",r)}},825(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var r=e.insertStyleElement(e);return{update:function(o){var t,a,n;t="",o.supports&&(t+="@supports (".concat(o.supports,") {")),o.media&&(t+="@media ".concat(o.media," {")),(a=void 0!==o.layer)&&(t+="@layer".concat(o.layer.length>0?" ".concat(o.layer):""," {")),t+=o.css,a&&(t+="}"),o.media&&(t+="}"),o.supports&&(t+="}"),(n=o.sourceMap)&&"u">typeof btoa&&(t+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(n))))," */")),e.styleTagTransform(t,r,e.options)},remove:function(){var e;null===(e=r).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,r){if(r.styleSheet)r.styleSheet.cssText=e;else{for(;r.firstChild;)r.removeChild(r.firstChild);r.appendChild(document.createTextNode(e))}}},959(e,r,o){var t=o(72),a=o.n(t),n=o(825),i=o.n(n),s=o(659),p=o.n(s),l=o(56),c=o.n(l),d=o(540),u=o.n(d),g=o(113),f=o.n(g),m=o(646),v={};v.styleTagTransform=f(),v.setAttributes=c(),v.insert=p().bind(null,"head"),v.domAPI=i(),v.insertStyleElement=u(),a()(m.A,v),m.A&&m.A.locals&&m.A.locals}}]);