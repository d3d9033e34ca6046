// Worker half of page.html: instantiate from a WebAssembly.Module received by message.
import * as kw from "/bindings/knotwork.mjs";

self.onmessage = async (e) => {
  const {module, modelUrl, n, prompt} = e.data;
  try {
    await kw.init(module);
    const model = await kw.openModel(await kw.urlSource(modelUrl));
    const s = await model.complete(prompt, {maxTokens: n, temperature: 0});
    model.close();
    self.postMessage({ids: s.ids, text: s.text});
  } catch (err) {
    self.postMessage({error: String(err && err.stack || err)});
  }
};
