package secrets_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/proxops/proxops/internal/secrets"
)

func ExampleValue() {
	token := secrets.New("0b6f2d4e-8a31-4c57-9e02-d1c3a5f7b9e4")
	fmt.Println(token)
	fmt.Printf("%q %#v\n", token, token)
	fmt.Println(fmt.Errorf("login with %v failed", token))
	// Output:
	// <redacted>
	// "<redacted>" <redacted>
	// login with <redacted> failed
}

func ExampleDecryptor() {
	data, _ := os.ReadFile("testdata/demo/secrets.sops.yaml")
	keyFile, _ := os.ReadFile("testdata/demo/demo.agekey")
	keys, _ := secrets.ParseAgeKeys("demo.agekey", keyFile)
	// In a service: secrets.NewDecryptor(secrets.FromEnvironment(os.LookupEnv)).
	d := secrets.NewDecryptor(keys)

	store, err := d.Decrypt(context.Background(), "clusters/demo/secrets.sops.yaml", data)
	if err != nil {
		fmt.Println(err)
		return
	}
	ssh, _ := store.ResolveSSHKeys([]string{"cloud-init.ssh-keys.main"}, "spec.cloud-init-data.ssh-key-refs")
	fmt.Println(len(ssh.Keys), ssh.Keys[0])

	_, err = store.Resolve("cloud-init.passwords.admin", "spec.cloud-init-data.ci-password-ref")
	fmt.Println(errors.Is(err, secrets.ErrMissingEntry))
	fmt.Println(err)
	// Output:
	// 1 <redacted>
	// true
	// clusters/demo/secrets.sops.yaml: spec.cloud-init-data.ci-password-ref: cloud-init.passwords.admin: no such entry in the secrets file; proxops fails closed
}
