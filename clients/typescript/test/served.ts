/**
 * The server the client tests talk to: a real `compassmem dev` that `tests/test_typescript_client.py` starts (the
 * `served_memory` fixture), named by the environment. Without it the tests fail: they never pass by skipping.
 */

function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(
      `${name} is not set: run these tests through pytest (tests/test_typescript_client.py), which starts ` +
        "`compassmem dev` and passes its address and keys",
    );
  }
  return value;
}

export const served = {
  url: required("COMPASSMEM_TEST_URL"),
  /** A tenant that has an API key, holding conversation "acme-1". */
  keyTenant: required("COMPASSMEM_TEST_KEY_TENANT"),
  key: required("COMPASSMEM_TEST_KEY"),
  adminKey: required("COMPASSMEM_TEST_ADMIN_KEY"),
  /** The server's COMPASSMEM_API_MAX_BODY_BYTES. */
  maxBodyBytes: Number(required("COMPASSMEM_TEST_MAX_BODY_BYTES")),
};

/** Poll `condition` until it holds; fail naming `what` after `timeoutMs`. */
export async function waitUntil(condition: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
}
