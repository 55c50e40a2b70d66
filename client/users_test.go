package client_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// TestIntegrationUsers: the user and role methods against a real broker, each refusal with
// its code.
func TestIntegrationUsers(t *testing.T) {
	t.Parallel()
	srv := startBroker(t, nil)
	ctx := itCtx(t)
	admin := itDial(t, srv.Addr(), itAdminUser, itAdminPass)
	if err := admin.CreateTopic(ctx, client.TopicConfig{Name: "audit", Kind: wire.KindDurable}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateUser(ctx, "reader", "r-pw"); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateUser(ctx, "reader", "x"); !errors.Is(err, &wire.Error{Code: wire.CodeUserExists}) {
		t.Errorf("CreateUser of an existing user: %v", err)
	}
	if err := admin.Grant(ctx, "reader", "audit", wire.RolesConsume); err != nil {
		t.Fatal(err)
	}
	if err := admin.Grant(ctx, "nobody", "audit", wire.RolesConsume); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownUser}) {
		t.Errorf("Grant to an unknown user: %v", err)
	}
	if err := admin.Grant(ctx, "reader", "", wire.RolesProduce); !errors.Is(err, &wire.Error{Code: wire.CodeInvalidRequest}) {
		t.Errorf("Grant of produce on the broker: %v", err)
	}
	reader := itDial(t, srv.Addr(), "reader", "r-pw")
	if _, err := reader.Metadata(ctx, "audit"); err != nil {
		t.Errorf("Metadata as a consumer: %v", err)
	}
	if err := reader.CreateUser(ctx, "x", "y"); !errors.Is(err, &wire.Error{Code: wire.CodeNotAuthorized}) {
		t.Errorf("CreateUser as a consumer: %v", err)
	}
	want := []wire.UserRoles{{User: "reader"}, {User: "reader", Topic: "audit", Roles: wire.RolesConsume}}
	if got, err := admin.ListUsers(ctx, "reader", ""); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ListUsers(reader) = %+v, %v", got, err)
	}
	if err := admin.SetPassword(ctx, "reader", "r-pw-2"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Revoke(ctx, "reader", "audit", wire.RolesConsume); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Metadata(ctx, "audit"); !errors.Is(err, &wire.Error{Code: wire.CodeNotAuthorized}) {
		t.Errorf("Metadata after the revoke: %v", err)
	}
	if err := admin.DeleteUser(ctx, "reader"); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteUser(ctx, "reader"); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownUser}) {
		t.Errorf("second DeleteUser: %v", err)
	}
	if err := admin.CreateUser(ctx, "bad\nname", "pw"); err == nil {
		t.Error("CreateUser sent a name with a control character")
	}
}
