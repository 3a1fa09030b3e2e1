// The tenant and its API key, asked once and kept in this tab's session storage (never sent anywhere but the API).

const TENANT = "compassmem.tenant";
const KEY = "compassmem.key";

export function savedCredentials() {
  const tenant = sessionStorage.getItem(TENANT);
  return tenant === null ? null : { tenant, key: sessionStorage.getItem(KEY) ?? "" };
}

/** Shows the dialog (filled with what is saved) and resolves with what the person entered, once saved. */
export function askCredentials(reason = "") {
  const dialog = document.getElementById("login");
  const form = document.getElementById("login-form");
  const tenant = document.getElementById("login-tenant");
  const key = document.getElementById("login-key");
  const saved = savedCredentials();
  tenant.value = saved?.tenant ?? "default";
  key.value = saved?.key ?? "";
  dialog.querySelector("p").textContent = reason ||
    "The key is kept in this tab only (session storage) and sent only to this API.";
  return new Promise((resolve) => {
    const done = (credentials) => {
      form.removeEventListener("submit", submitted);
      dialog.removeEventListener("cancel", cancelled);
      resolve(credentials);
    };
    const submitted = () => {
      sessionStorage.setItem(TENANT, tenant.value.trim());
      sessionStorage.setItem(KEY, key.value.trim());
      done(savedCredentials());
    };
    // Escape keeps what was saved; with nothing saved yet there is nothing to go back to.
    const cancelled = (event) => (saved ? done(saved) : event.preventDefault());
    form.addEventListener("submit", submitted);
    dialog.addEventListener("cancel", cancelled);
    dialog.showModal();
    (saved ? key : tenant).focus();
  });
}
